// LogRateLimiter: at most `burst` log lines per `period` for one kind of
// event, so that a flood of them (a stranger opening connection after
// connection) cannot flood the log — and, through a launcher's pipes, block
// the process that writes it. What it holds back is counted and reported
// with the next line it lets through.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tessera {

class LogRateLimiter {
 public:
  LogRateLimiter(int burst, absl::Duration period) : burst_(burst), period_(period) {}

  // Whether to log this event; if so, `*held_back` is how many were not
  // logged since the last one that was.
  bool Allow(int64_t* held_back) {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - window_start_ >= period_) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= burst_) {
      ++held_back_;
      return false;
    }
    ++in_window_;
    *held_back = held_back_;
    held_back_ = 0;
    return true;
  }

 private:
  const int burst_;
  const absl::Duration period_;
  Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera
