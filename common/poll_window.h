// PollWindow: whether a thread waiting for its next event should poll for it
// or sleep — the one policy behind the worker pool's polling (see Note [Pool
// threads spin, then sleep], common/thread_pool.cc) and the guarded
// transport's loop (see Note [Spin, then sleep], event_loop.h).
//
// It keeps a moving average of how long the next event took to come after
// a wait began (the last ~8 samples, each counted as at most twice the
// window, so that one long pause turns polling off for a few events only,
// not for the ~65 an uncapped 10 s sample would take) and says to poll
// while that average is under the window. A zero window never polls.
//
// Thread-safety: any thread; samples are meant to come from one thread at a
// time (the pool's under its lock, the loop's from the loop), and a read
// racing a sample sees the old average or the new one — one poll more or
// less, never a wrong result.
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace tessera {

// CLOCK_MONOTONIC in nanoseconds, straight from the vDSO.
inline int64_t MonotonicNanos() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

class PollWindow {
 public:
  explicit PollWindow(absl::Duration window)
      : window_ns_(std::max<int64_t>(0, absl::ToInt64Nanoseconds(window))) {}

  int64_t window_ns() const { return window_ns_; }
  bool enabled() const { return window_ns_ > 0; }

  // The next event came `waited_ns` after the wait began.
  void NoteWaited(int64_t waited_ns) {
    const int64_t sample = std::min(waited_ns, 2 * window_ns_);
    const int64_t typical = typical_ns_.load(std::memory_order_relaxed);
    typical_ns_.store(typical + (sample - typical) / 8, std::memory_order_relaxed);
  }

  // Whether events have been coming within the window.
  bool WorthPolling() const {
    return enabled() && typical_ns_.load(std::memory_order_relaxed) < window_ns_;
  }

 private:
  const int64_t window_ns_;
  std::atomic<int64_t> typical_ns_{0};
};

}  // namespace tessera
