// How long waking a sleeping thread takes, by where it sleeps: the figure
// behind it (see Note [Pool threads spin, then sleep], common/thread_pool.cc). A
// waker pinned to CPU 0 sets a flag and signals a condition variable every
// 200 µs; the waiter, pinned to CPU `w`, records how long after the signal
// it runs. Four cases: the waiter on the waker's CPU or on another, with
// that CPU idle or kept busy by a thread that yields in a loop (as a
// polling transport or pool thread does). Prints one JSON object: median
// µs per case. Needs two CPUs.
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/usage.h"

namespace {

int64_t NowNanos() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Median wake-up latency in µs of a waiter on `waiter_cpu`, woken from CPU 0.
double MedianWakeMicros(int waiter_cpu, bool busy) {
  std::mutex mu;
  std::condition_variable cv;
  int64_t signalled_at = 0;
  bool stop = false;
  std::vector<int64_t> latencies;
  std::atomic<bool> hogging{busy};
  std::thread hog([&] {
    PinTo(waiter_cpu);
    while (hogging.load()) sched_yield();
  });
  std::thread waiter([&] {
    PinTo(waiter_cpu);
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return signalled_at != 0 || stop; });
      if (stop) return;
      latencies.push_back(NowNanos() - signalled_at);
      signalled_at = 0;
    }
  });
  PinTo(0);
  for (int i = 0; i < 3000; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the waiter is asleep again
    {
      std::lock_guard<std::mutex> lock(mu);
      signalled_at = NowNanos();
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_one();
  waiter.join();
  hogging.store(false);
  hog.join();
  std::sort(latencies.begin(), latencies.end());
  return latencies.empty() ? -1 : latencies[latencies.size() / 2] / 1e3;
}

}  // namespace

constexpr char kUsage[] =
    "usage: wake_latency\n"
    "Median µs from signalling a condition variable to the sleeping waiter running, with the\n"
    "waiter on the waker's CPU or another, that CPU idle or busy; prints JSON. Needs two CPUs.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "wake_latency needs two CPUs\n");
    return 1;
  }
  std::printf(
      "{\"same_cpu_idle_us\": %.1f, \"same_cpu_busy_us\": %.1f, "
      "\"other_cpu_idle_us\": %.1f, \"other_cpu_busy_us\": %.1f}\n",
      MedianWakeMicros(0, false), MedianWakeMicros(0, true), MedianWakeMicros(1, false),
      MedianWakeMicros(1, true));
  return 0;
}
