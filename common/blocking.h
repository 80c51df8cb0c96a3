// Telling a thread pool that one of its threads is about to block.
//
// Note [Compensating blocked pool threads]
// An RPC handler on a pool thread that waits for a nested synchronous call
// holds its thread, while the reply's continuation needs a thread of the same
// pool. With every thread so blocked nothing runs, and every call can only
// time out (PyTorch's RPC has the same trap and asks users to write
// asynchronous handlers instead). So Future::Wait, before it blocks, tells
// the waiting thread's pool (ScopedBlocking), and the pool lets another
// thread run in its place — an idle one, or a new one — keeping
// `num_threads` threads running tasks while others wait, up to a cap on all
// threads. Only waits on futures are compensated: a handler that blocks on a
// lock or a socket still holds its thread.
#pragma once

namespace tessera {

class BlockingObserver {
 public:
  virtual void BeginBlocking() = 0;
  virtual void EndBlocking() = 0;

 protected:
  ~BlockingObserver() = default;
};

// The observer of the calling thread (its pool), or null.
inline thread_local BlockingObserver* current_blocking_observer = nullptr;

// Brackets a blocking wait on the calling thread.
class ScopedBlocking {
 public:
  ScopedBlocking() : observer_(current_blocking_observer) {
    if (observer_ != nullptr) observer_->BeginBlocking();
  }
  ~ScopedBlocking() {
    if (observer_ != nullptr) observer_->EndBlocking();
  }
  ScopedBlocking(const ScopedBlocking&) = delete;
  ScopedBlocking& operator=(const ScopedBlocking&) = delete;

 private:
  BlockingObserver* const observer_;
};

}  // namespace tessera
