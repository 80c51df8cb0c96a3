// RegistrationWaiters: callers waiting for a name (a function, a class) to
// be registered — see Note [Late registration] in rpc/runtime.h. Used by the
// function and class registries.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/deadline_timer.h"
#include "common/future.h"
#include "common/mutex.h"

namespace tessera {

class RegistrationWaiters {
 public:
  // Completes with true once `registered()` holds — at once if it does, or
  // when Notify(name) runs — or with false at `until`. Registries call
  // Notify after adding a name, so a registration between the first check
  // and the wait is seen by the second check.
  template <typename Registered>
  Future<bool> WhenRegistered(const std::string& name, absl::Time until, DeadlineTimer& timer,
                              const Registered& registered) {
    if (registered()) return Future<bool>::Ready(true);
    Future<bool> notified = Await(name, until, timer);
    if (registered()) return Future<bool>::Ready(true);
    return notified;
  }

  // How many callers wait for `name` now: a worker's view of what it waits
  // on, and the event a test waits for instead of sleeping.
  size_t Waiting(const std::string& name) const {
    MutexLock lock(&state_->mu);
    auto it = state_->waiting.find(name);
    return it == state_->waiting.end() ? 0 : it->second.size();
  }

  // Completes every waiter for `name` with true.
  void Notify(const std::string& name) {
    std::map<uint64_t, Promise<bool>> waiters;
    {
      MutexLock lock(&state_->mu);
      auto it = state_->waiting.find(name);
      if (it == state_->waiting.end()) return;
      waiters = std::move(it->second);
      state_->waiting.erase(it);
    }
    for (auto& [id, promise] : waiters) promise.Set(true);
  }

 private:
  // Completes with true at Notify(name), or with false at `until`.
  Future<bool> Await(const std::string& name, absl::Time until, DeadlineTimer& timer) {
    Promise<bool> promise;
    uint64_t id = 0;
    {
      MutexLock lock(&state_->mu);
      id = state_->next_id++;
      state_->waiting[name].emplace(id, promise);
    }
    timer.Schedule(until, [state = state_, name, id] { state->Complete(name, id, false); });
    return promise.GetFuture();
  }

  // Shared with the timer's callbacks, which may outlive the registry.
  struct State {
    void Complete(const std::string& name, uint64_t id, bool registered) {
      Promise<bool> promise;
      {
        MutexLock lock(&mu);
        auto it = waiting.find(name);
        if (it == waiting.end()) return;
        auto found = it->second.find(id);
        if (found == it->second.end()) return;
        promise = std::move(found->second);
        it->second.erase(found);
        if (it->second.empty()) waiting.erase(it);
      }
      promise.Set(registered);
    }
    Mutex mu;
    std::map<std::string, std::map<uint64_t, Promise<bool>>> waiting ABSL_GUARDED_BY(mu);
    uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tessera
