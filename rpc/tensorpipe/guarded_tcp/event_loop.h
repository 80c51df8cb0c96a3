// The guarded transports' event loop: TensorPipe's EpollLoop (the same
// handler interface, records and ordering: handlers run through the
// context's deferred executor), except that it spins for a moment before it
// sleeps when an answer is due.
//
// Note [Spin, then sleep]: on a virtualised host a thread woken from
// epoll_wait takes tens of microseconds to run again, and a call waits for
// two such wake-ups on its path (the callee's loop, then the caller's).
// TensorPipe's shm reactor avoids them by busy-polling for ever — a core per
// process, the training's core (issue 32). This loop polls only while an
// answer is likely close: for `spin` after it handled events, and after
// ExpectAnswer() (called when a connection writes: a request wants its
// response, a response often precedes the next request) — and only while
// answers do come that fast: it keeps a moving average of the time from a
// write to the next event (common/poll_window.h) and does not poll when that
// is longer than `spin` (a trainer whose server computes for milliseconds
// would waste every window). Idle, it sleeps in epoll_wait and costs nothing; a zero `spin`
// never polls.
//
// Thread-safety: registerDescriptor/unregisterDescriptor from the loop (the
// deferred executor); ExpectAnswer, RunAfterNextPoll, close and join from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "common/poll_window.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class EventLoop final {
 public:
  using EventHandler = tensorpipe::EpollLoop::EventHandler;

  EventLoop(tensorpipe::DeferredExecutor& executor, absl::Duration spin);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void registerDescriptor(int fd, int events, std::shared_ptr<EventHandler> handler);
  void unregisterDescriptor(int fd);
  // Polls for the next `spin` instead of sleeping (waking the loop if it
  // sleeps, off the answer's path: the answer is still on its way).
  void ExpectAnswer();
  // Runs `fn` through the executor after the loop's next poll, behind that
  // poll's handlers: work that must wait its turn behind the other ready
  // descriptors (see Note [Read ahead], connection_impl.cc).
  void RunAfterNextPoll(std::function<void()> fn);
  void close();
  void join();

  // TESSERA_TRANSPORT_SPIN_US, else the default below.
  static absl::Duration SpinFromEnv();
  static constexpr absl::Duration kDefaultSpin = absl::Microseconds(200);

 private:
  void Loop();
  void Wakeup();
  bool HasHandlers();

  tensorpipe::DeferredExecutor& executor_;
  tensorpipe::Fd epoll_fd_;
  tensorpipe::Fd event_fd_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> joined_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<int64_t> spin_until_ns_{0};
  // When the last write expecting an answer was made (0: none since the
  // last event), and how long answers have been taking.
  std::atomic<int64_t> expected_at_ns_{0};
  PollWindow answers_;

  // As EpollLoop: each registration gets a fresh record, so an event
  // reported for an fd's earlier registration is never given to a later one.
  std::mutex handlers_mu_;
  uint64_t next_record_ = 1;  // 0 is the eventfd
  std::unordered_map<int, uint64_t> fd_to_record_;
  std::unordered_map<uint64_t, std::shared_ptr<EventHandler>> record_to_handler_;

  std::mutex after_poll_mu_;
  std::vector<std::function<void()>> after_poll_;  // guarded by after_poll_mu_
  std::atomic<bool> has_after_poll_{false};

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace tessera::rpc::guarded_tcp
