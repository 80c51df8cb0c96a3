// CompletionLoop: the threads that drive the gRPC agent's streams.
//
// The agent uses gRPC's completion-queue API rather than its callback API:
// gRPC 1.51 runs callback reactions on its own executor threads, which cost
// about 40 µs per side of a round trip on this machine kind (measured with
// bench/grpc_floor.cc against a callback-API variant of it). Here a few
// threads of ours wait on one completion queue and run each finished
// operation's CompletionTag directly.
//
// Thread-safety: Shutdown() once, from a thread that is not a loop thread,
// after the server using the queue has been shut down.
#pragma once

#include <grpcpp/completion_queue.h>
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include <memory>
#include <thread>
#include <vector>

namespace tessera::rpc {

// What a finished operation runs; `ok` is the completion queue's verdict.
class CompletionTag {
 public:
  virtual void Complete(bool ok) = 0;

 protected:
  ~CompletionTag() = default;
};

// A tag that calls `owner->*method(ok)`.
template <typename Owner>
class MemberTag final : public CompletionTag {
 public:
  MemberTag(Owner* owner, void (Owner::*method)(bool)) : owner_(owner), method_(method) {}
  void Complete(bool ok) override { (owner_->*method_)(ok); }

 private:
  Owner* const owner_;
  void (Owner::*const method_)(bool);
};

// Marks `tag` as handed to gRPC; pass every tag through it when starting an
// operation. Debian's gRPC is not built with ThreadSanitizer, so TSan cannot
// see it carry the tag (and what the starting thread wrote before) to the
// loop thread; this and the loop's matching acquire tell it. A no-op in
// other builds.
// (It also makes the void* gRPC carries a CompletionTag*, which is what the
// loop casts it back to.)
inline CompletionTag* Handed(CompletionTag* tag) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(tag);
#endif
  return tag;
}

class CompletionLoop {
 public:
  // Polls `queue` (which the server builder made) with `threads` threads.
  CompletionLoop(std::unique_ptr<grpc::ServerCompletionQueue> queue, int threads);
  ~CompletionLoop() { Shutdown(); }

  grpc::ServerCompletionQueue* queue() { return queue_.get(); }

  // Shuts the queue down, runs what is still queued and joins the threads.
  void Shutdown();

 private:
  void Poll();

  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::vector<std::thread> threads_;
  bool shut_down_ = false;
};

}  // namespace tessera::rpc
