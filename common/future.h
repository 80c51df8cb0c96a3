// Future<T> / Promise<T>: the one asynchronous result type of Tessera.
//
// A Promise is completed exactly once, with a value or an error Status; later
// attempts are ignored and reported by the return value of Set(). Waiting
// always takes a deadline. Callbacks registered with OnReady()/Then() run
// once, after completion: on the completing thread, or posted to the
// Executor given to the Promise (transport threads use that so user code
// never runs on them). A callback added after completion runs inline.
// No callback is ever invoked while an internal lock is held. A producer may
// set a wait hook (Promise::SetWaitHook) to do the work on the first thread
// that waits, rather than hand it over (common/serial_queue.h).
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/blocking.h"
#include "common/executor.h"
#include "common/mutex.h"
#include "common/status.h"

namespace tessera {

template <typename T>
class Future;

namespace future_internal {

template <typename T>
class State : public std::enable_shared_from_this<State<T>> {
 public:
  using Callback = std::function<void(const absl::StatusOr<T>&)>;

  explicit State(Executor* executor) : executor_(executor) {}

  bool Set(absl::StatusOr<T> result) {
    std::vector<Callback> callbacks;
    {
      MutexLock lock(&mu_);
      if (result_.has_value()) return false;
      result_.emplace(std::move(result));
      ready_.store(true, std::memory_order_release);
      cv_.SignalAll();
      callbacks.swap(callbacks_);
      wait_hook_ = nullptr;
      has_wait_hook_.store(false, std::memory_order_relaxed);
    }
    // result_ is immutable from here on, so reading it unlocked is safe.
    for (auto& callback : callbacks) Dispatch(std::move(callback));
    return true;
  }

  void AddCallback(Callback callback) {
    {
      MutexLock lock(&mu_);
      if (!result_.has_value()) {
        callbacks_.push_back(std::move(callback));
        return;
      }
    }
    callback(Settled());
  }

  bool IsReady() const {
    MutexLock lock(&mu_);
    return result_.has_value();
  }

  void SetWaitHook(std::function<void(absl::Time)> hook) {
    MutexLock lock(&mu_);
    if (result_.has_value()) return;
    wait_hook_ = std::move(hook);
    has_wait_hook_.store(true, std::memory_order_release);
  }

  // Returns the result, or DeadlineExceeded if none arrived by `deadline`.
  absl::StatusOr<T> Wait(absl::Time deadline) const {
    if (has_wait_hook_.load(std::memory_order_acquire)) RunWaitHook(deadline);
    // A reply often arrives within microseconds; yielding for a moment
    // before sleeping saves the futex wake-up that would otherwise sit on
    // the critical path of every synchronous call.
    for (int i = 0; i < kSpinYields && !ready_.load(std::memory_order_acquire); ++i) {
      std::this_thread::yield();
    }
    // See Note [Compensating blocked pool threads]: a pool thread's pool may
    // run another thread while this one sleeps.
    std::optional<ScopedBlocking> blocking;
    if (!ready_.load(std::memory_order_acquire)) blocking.emplace();
    MutexLock lock(&mu_);
    auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return result_.has_value(); };
    if (!cv_.WaitUntil(&mu_, ready, deadline)) {
      return absl::DeadlineExceededError("timed out waiting for a future");
    }
    return *result_;
  }

 private:
  // Runs the wait hook once, on the first waiting thread, outside the lock.
  void RunWaitHook(absl::Time deadline) const {
    std::function<void(absl::Time)> hook;
    {
      MutexLock lock(&mu_);
      hook.swap(wait_hook_);
      has_wait_hook_.store(false, std::memory_order_relaxed);
    }
    if (hook) hook(deadline);
  }

  void Dispatch(Callback callback) {
    if (executor_ == nullptr) {
      callback(Settled());
      return;
    }
    executor_->Post([callback = std::move(callback),
                     self = this->shared_from_this()]() {
      callback(self->Settled());
    });
  }

  // The result, read without the lock: once set it never changes (Set
  // succeeds once), and callers have seen it set. The one read the
  // thread-safety analysis is told to trust.
  const absl::StatusOr<T>& Settled() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return *result_; }

  static constexpr int kSpinYields = 64;

  mutable Mutex mu_;
  mutable CondVar cv_;
  std::atomic<bool> ready_{false};  // mirrors result_.has_value()
  std::optional<absl::StatusOr<T>> result_ ABSL_GUARDED_BY(mu_);
  std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  mutable std::function<void(absl::Time)> wait_hook_ ABSL_GUARDED_BY(mu_);
  mutable std::atomic<bool> has_wait_hook_{false};  // wait_hook_ is set
  Executor* const executor_;
};

template <typename U>
struct IsFuture : std::false_type {};
template <typename U>
struct IsFuture<Future<U>> : std::true_type {};

template <typename U>
struct IsStatusOr : std::false_type {};
template <typename U>
struct IsStatusOr<absl::StatusOr<U>> : std::true_type {};

}  // namespace future_internal

template <typename T>
class Promise;

template <typename T>
class Future {
 public:
  using ValueType = T;

  // A future that is already complete.
  static Future Ready(absl::StatusOr<T> result) {
    Promise<T> promise;
    promise.Set(std::move(result));
    return promise.GetFuture();
  }

  bool IsReady() const { return state_->IsReady(); }

  absl::StatusOr<T> Wait(absl::Time deadline) const {
    return state_->Wait(deadline);
  }
  absl::StatusOr<T> Wait(absl::Duration timeout) const {
    return state_->Wait(absl::Now() + timeout);
  }
  // The synchronous form of the error rule (README, "Errors"): the value,
  // or StatusError carrying the failure — DeadlineExceeded when the future
  // is not complete within `timeout`.
  T Get(absl::Duration timeout) const { return ValueOrThrow(Wait(timeout)); }

  // Runs `callback(result)` once the future completes (see header comment).
  void OnReady(std::function<void(const absl::StatusOr<T>&)> callback) const {
    auto state = state_;  // keeps the state alive until the callback ran
    state_->AddCallback(
        [state, callback = std::move(callback)](const absl::StatusOr<T>& r) {
          callback(r);
        });
  }

  // Chains a continuation. `fn` takes `const absl::StatusOr<T>&` and returns
  // U, absl::StatusOr<U> or Future<U>; the result is a Future<U> that
  // completes when `fn` (and the future it returned, if any) completes.
  // `fn` runs where this future's callbacks run; `executor` (optional) is
  // where the callbacks of the returned future will run.
  template <typename Fn>
  auto Then(Fn fn, Executor* executor = nullptr) const;

 private:
  friend class Promise<T>;
  explicit Future(std::shared_ptr<future_internal::State<T>> state)
      : state_(std::move(state)) {}

  std::shared_ptr<future_internal::State<T>> state_;
};

template <typename T>
class Promise {
 public:
  // `executor` (optional, not owned, must outlive completion) runs callbacks.
  explicit Promise(Executor* executor = nullptr)
      : state_(std::make_shared<future_internal::State<T>>(executor)) {}

  Future<T> GetFuture() const { return Future<T>(state_); }

  // `hook(deadline)` runs once, on the first thread that waits for the
  // future before it is complete, before that thread blocks: the producer
  // may complete the future right there (e.g. run the queued work on the
  // waiting thread, saving two thread hand-offs). It gets the waiter's
  // deadline and must not keep the waiter past it. Not run if the future
  // completes first.
  void SetWaitHook(std::function<void(absl::Time)> hook) const {
    state_->SetWaitHook(std::move(hook));
  }

  // Completes the future; returns false if it was already complete.
  bool Set(absl::StatusOr<T> result) const {
    return state_->Set(std::move(result));
  }

 private:
  std::shared_ptr<future_internal::State<T>> state_;
};

template <typename T>
template <typename Fn>
auto Future<T>::Then(Fn fn, Executor* executor) const {
  using R = std::invoke_result_t<Fn, const absl::StatusOr<T>&>;
  if constexpr (future_internal::IsFuture<R>::value) {
    using U = typename R::ValueType;
    Promise<U> next(executor);
    OnReady([next, fn = std::move(fn)](const absl::StatusOr<T>& r) mutable {
      fn(r).OnReady([next](const absl::StatusOr<U>& u) { next.Set(u); });
    });
    return next.GetFuture();
  } else if constexpr (future_internal::IsStatusOr<R>::value) {
    using U = typename R::value_type;
    Promise<U> next(executor);
    OnReady([next, fn = std::move(fn)](const absl::StatusOr<T>& r) mutable {
      next.Set(fn(r));
    });
    return next.GetFuture();
  } else {
    Promise<R> next(executor);
    OnReady([next, fn = std::move(fn)](const absl::StatusOr<T>& r) mutable {
      next.Set(fn(r));
    });
    return next.GetFuture();
  }
}

// Runs `fn` (which returns a Future<T>) on `executor`, never inline; the
// result completes with fn's. For work that waited for something and must
// not run on the thread that completed it: a call that waited for a worker's
// start or a late registration would otherwise run inside Create() or
// Register(), one after another (see Note [Deferred calls], rpc/runtime.h).
template <typename T, typename Fn>
Future<T> RunOn(Executor& executor, Fn fn) {
  Promise<T> done;
  executor.Post([fn = std::move(fn), done]() mutable {
    fn().OnReady([done](const absl::StatusOr<T>& result) { done.Set(result); });
  });
  return done.GetFuture();
}

// Completes with the first error among `futures`, or true once all of them
// have succeeded (at once when there are none).
template <typename T>
Future<bool> WhenAllOk(const std::vector<Future<T>>& futures) {
  if (futures.empty()) return Future<bool>::Ready(true);
  Promise<bool> done;
  auto remaining = std::make_shared<std::atomic<size_t>>(futures.size());
  for (const auto& future : futures) {
    future.OnReady([done, remaining](const absl::StatusOr<T>& result) {
      if (!result.ok()) {
        done.Set(result.status());  // the first error wins; later Sets are ignored
      } else if (remaining->fetch_sub(1) == 1) {
        done.Set(true);
      }
    });
  }
  return done.GetFuture();
}

}  // namespace tessera
