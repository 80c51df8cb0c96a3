// DeadlineTimer: runs callbacks at given times on one background thread.
//
// Used to fail futures whose deadline passed. Callbacks must be short and
// must not block (completing a promise is the intended use). When Cancel()
// returns, the callback is neither running nor going to run (it waits for a
// callback already under way, unless called from that callback itself), so
// an owner may cancel its timers and then safely destroy what they touch.
// The destructor drops pending callbacks.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "absl/time/time.h"

namespace tessera {

class DeadlineTimer {
 public:
  using Id = uint64_t;

  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Schedules `fn` at `when`; an infinite `when` schedules nothing (returns 0).
  Id Schedule(absl::Time when, std::function<void()> fn);
  void Cancel(Id id);

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::multimap<absl::Time, Id> by_time_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<Id, std::pair<absl::Time, std::function<void()>>> entries_
      ABSL_GUARDED_BY(mu_);
  Id running_ ABSL_GUARDED_BY(mu_) = 0;  // callback now executing, 0 if none
  // When the loop will next wake by itself. Scheduling a later deadline does
  // not wake it (the common case: a call's deadline is seconds away), which
  // saves a thread wake-up per RPC; an earlier one bumps generation_.
  absl::Time wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace tessera
