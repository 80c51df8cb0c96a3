// Calls per second of a benchmark's call, run back to back for a while.
#pragma once

#include <chrono>
#include <cstdint>

namespace tessera::bench {

// Runs `call(i)` (i = 0, 1, ...) for about `seconds`; returns calls per
// second.
template <typename Call>
double CallRate(double seconds, Call call) {
  using Clock = std::chrono::steady_clock;
  int64_t calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    call(calls++);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return calls / elapsed;
}

}  // namespace tessera::bench
