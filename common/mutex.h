// Mutex, MutexLock and CondVar: std::mutex with Abseil's thread-safety
// annotations.
//
// Why not absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, so
// TSan cannot see absl::Mutex hand-offs and reports every guarded access as
// a race; std::mutex is intercepted by TSan. The annotations keep
// ABSL_GUARDED_BY meaningful for clang's -Wthread-safety.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits for a predicate over state guarded by a Mutex. Whoever changes that
// state must call SignalAll() (or Signal()) after the change.
class CondVar {
 public:
  // Blocks until `ready()`; `mu` must be held.
  template <typename Pred>
  void Wait(Mutex* mu, Pred ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, ready);
    lock.release();
  }

  // Blocks until `ready()` or `deadline`; returns ready(). `mu` must be held.
  template <typename Pred>
  bool WaitUntil(Mutex* mu, Pred ready, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool result;
    if (deadline == absl::InfiniteFuture()) {
      cv_.wait(lock, ready);
      result = true;
    } else {
      result = cv_.wait_until(lock, absl::ToChronoTime(deadline), ready);
    }
    lock.release();
    return result;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace tessera
