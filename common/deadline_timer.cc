#include "common/deadline_timer.h"

#include <algorithm>
#include <utility>

namespace tessera {

DeadlineTimer::DeadlineTimer() : thread_([this] { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

DeadlineTimer::Id DeadlineTimer::Schedule(absl::Time when,
                                          std::function<void()> fn) {
  if (when == absl::InfiniteFuture()) return 0;
  MutexLock lock(&mu_);
  const Id id = next_id_++;
  if (when < wake_at_) {
    ++generation_;
    cv_.SignalAll();
  }
  by_time_.emplace(when, id);
  entries_.emplace(id, std::make_pair(when, std::move(fn)));
  return id;
}

void DeadlineTimer::Cancel(Id id) {
  if (id == 0) return;
  MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (std::this_thread::get_id() != thread_.get_id()) {
      cv_.Wait(&mu_, [this, id]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return running_ != id; });
    }
    return;
  }
  auto range = by_time_.equal_range(it->second.first);
  for (auto t = range.first; t != range.second; ++t) {
    if (t->second == id) {
      by_time_.erase(t);
      break;
    }
  }
  entries_.erase(it);
}

void DeadlineTimer::Loop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (!by_time_.empty() && by_time_.begin()->first <= now) {
      const Id id = by_time_.begin()->second;
      auto entry = entries_.find(id);
      std::function<void()> fn = std::move(entry->second.second);
      entries_.erase(entry);
      by_time_.erase(by_time_.begin());
      running_ = id;
      mu_.Unlock();
      fn();
      mu_.Lock();
      running_ = 0;
      cv_.SignalAll();  // wakes Cancel() waiting for this callback
      continue;
    }
    // Idle or far-off deadlines: tick at least this often, so that a new
    // deadline further out than the tick never needs to wake the thread.
    constexpr absl::Duration kMaxSleep = absl::Milliseconds(50);
    const absl::Time tick = absl::Now() + kMaxSleep;
    const absl::Time wake =
        by_time_.empty() ? tick : std::min(tick, by_time_.begin()->first);
    wake_at_ = wake;
    const uint64_t seen = generation_;
    auto changed = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stopping_ || generation_ != seen;
    };
    cv_.WaitUntil(&mu_, changed, wake);
    wake_at_ = absl::InfinitePast();  // awake: Schedule() need not signal
  }
}

}  // namespace tessera
