#include "rpc/tensorpipe/guarded_tcp/event_loop.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::rpc::guarded_tcp {
namespace {

constexpr int kCapacity = 64;

// A failed system call as the library reports errors (README "Errors").
StatusError SystemError(const char* what) {
  return StatusError(absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno))));
}

int CheckedFd(int fd, const char* what) {
  if (fd < 0) throw SystemError(what);
  return fd;
}

}  // namespace

absl::Duration EventLoop::SpinFromEnv() {
  const char* env = std::getenv("TESSERA_TRANSPORT_SPIN_US");
  int64_t us = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &us) || us < 0) return kDefaultSpin;
  return absl::Microseconds(us);
}

EventLoop::EventLoop(tensorpipe::DeferredExecutor& executor, absl::Duration spin)
    : executor_(executor),
      epoll_fd_(CheckedFd(::epoll_create1(EPOLL_CLOEXEC), "epoll_create1")),
      event_fd_(CheckedFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd")),
      answers_(spin) {
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_fd_.fd(), EPOLL_CTL_ADD, event_fd_.fd(), &ev) != 0) {
    throw SystemError("epoll_ctl(eventfd)");
  }
  thread_ = std::thread([this] { Loop(); });
}

EventLoop::~EventLoop() { join(); }

void EventLoop::close() {
  if (!closed_.exchange(true)) Wakeup();
}

void EventLoop::join() {
  close();
  if (!joined_.exchange(true)) thread_.join();
}

void EventLoop::Wakeup() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is near overflow: the loop is awake then.
  (void)!::write(event_fd_.fd(), &one, sizeof(one));
}

void EventLoop::ExpectAnswer() {
  if (!answers_.enabled()) return;
  const int64_t now = MonotonicNanos();
  expected_at_ns_.store(now, std::memory_order_relaxed);
  if (!answers_.WorthPolling()) return;
  spin_until_ns_.store(now + answers_.window_ns(), std::memory_order_relaxed);
  if (sleeping_.load(std::memory_order_acquire)) Wakeup();
}

void EventLoop::RunAfterNextPoll(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(after_poll_mu_);
    after_poll_.push_back(std::move(fn));
    has_after_poll_.store(true, std::memory_order_release);
  }
  if (sleeping_.load(std::memory_order_acquire)) Wakeup();
}

void EventLoop::registerDescriptor(int fd, int events, std::shared_ptr<EventHandler> handler) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  const uint64_t record = next_record_++;
  struct epoll_event ev {};
  ev.events = events;
  ev.data.u64 = record;
  auto it = fd_to_record_.find(fd);
  int op = EPOLL_CTL_ADD;
  if (it == fd_to_record_.end()) {
    fd_to_record_.emplace(fd, record);
  } else {
    record_to_handler_.erase(it->second);
    it->second = record;
    op = EPOLL_CTL_MOD;
  }
  record_to_handler_.emplace(record, std::move(handler));
  // As EpollLoop, which throws too: only a closed or foreign fd fails here.
  if (::epoll_ctl(epoll_fd_.fd(), op, fd, &ev) != 0) {
    throw SystemError("epoll_ctl");
  }
}

void EventLoop::unregisterDescriptor(int fd) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  auto it = fd_to_record_.find(fd);
  if (it == fd_to_record_.end()) return;
  record_to_handler_.erase(it->second);
  fd_to_record_.erase(it);
  (void)::epoll_ctl(epoll_fd_.fd(), EPOLL_CTL_DEL, fd, nullptr);
  // A closing loop waits for its last handler to go.
  if (fd_to_record_.empty()) Wakeup();
}

bool EventLoop::HasHandlers() {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  return !fd_to_record_.empty();
}

void EventLoop::Loop() {
  std::vector<struct epoll_event> events(kCapacity);
  while (!closed_.load() || HasHandlers()) {
    const bool spin = MonotonicNanos() < spin_until_ns_.load(std::memory_order_relaxed);
    if (!spin) sleeping_.store(true, std::memory_order_release);
    // Re-checked after announcing sleep: an ExpectAnswer() or
    // RunAfterNextPoll() in between either saw `sleeping_` (and wakes us) or
    // left something we see here.
    const bool sleep = !spin &&
                       MonotonicNanos() >= spin_until_ns_.load(std::memory_order_relaxed) &&
                       !has_after_poll_.load(std::memory_order_acquire);
    const int n = ::epoll_wait(epoll_fd_.fd(), events.data(), kCapacity, sleep ? -1 : 0);
    sleeping_.store(false, std::memory_order_relaxed);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EBADF, EFAULT, EINVAL: this loop's own state is broken.
      TESSERA_LOG(ERROR) << "epoll_wait failed: " << std::strerror(errno);
      std::abort();
    }
    std::vector<std::function<void()>> after_poll;
    if (has_after_poll_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(after_poll_mu_);
      after_poll.swap(after_poll_);
      has_after_poll_.store(false, std::memory_order_relaxed);
    }
    if (n == 0 && after_poll.empty()) {
      sched_yield();  // polling: let a thread that shares this core run
      continue;
    }
    std::vector<struct epoll_event> ready;
    ready.reserve(n);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        uint64_t value;
        (void)!::read(event_fd_.fd(), &value, sizeof(value));
      } else {
        ready.push_back(events[i]);
      }
    }
    if (ready.empty() && after_poll.empty()) continue;
    if (answers_.enabled() && !ready.empty()) {
      const int64_t now = MonotonicNanos();
      if (const int64_t expected = expected_at_ns_.exchange(0, std::memory_order_relaxed);
          expected != 0) {
        // One slow answer (a large tensor, a long handler) does not turn
        // polling off by itself.
        answers_.NoteWaited(now - expected);
      }
      if (answers_.WorthPolling()) {
        spin_until_ns_.store(now + answers_.window_ns(), std::memory_order_relaxed);
      }
    }
    executor_.runInLoop([this, ready = std::move(ready), after_poll = std::move(after_poll)] {
      for (const auto& event : ready) {
        std::shared_ptr<EventHandler> handler;
        {
          std::lock_guard<std::mutex> lock(handlers_mu_);
          auto it = record_to_handler_.find(event.data.u64);
          if (it == record_to_handler_.end()) continue;
          handler = it->second;
        }
        handler->handleEventsFromLoop(static_cast<int>(event.events));
      }
      for (const auto& fn : after_poll) fn();
    });
  }
}

}  // namespace tessera::rpc::guarded_tcp
