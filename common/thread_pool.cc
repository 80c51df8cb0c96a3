#include "common/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <utility>

#include "common/logging.h"

// Note [Pool threads spin, then sleep]: handing a task to a sleeping pool
// thread wakes it through a futex, and on this project's virtual machines
// that wake-up takes ≈1 µs when the thread runs on the waker's CPU but ≈25
// µs when it is sent to another, busy CPU and 40–50 µs to an idle one (an
// inter-processor interrupt, dear in a guest; bench/wake_latency). Where a
// hand-off lands is chance, so same-host RPC round trips were bimodal — 25
// or 60 µs, from run to run and call to call (docs/benchmarks-history.md,
// "Pool threads spin, then sleep"): the callee's hand-off to its pool was 5
// µs in the fast calls and 27 µs in the slow ones. A thread that finds the
// queue empty after a task therefore polls it for up to `spin` (yielding its
// core on every turn) before it sleeps — one thread per pool at most, and
// only while tasks have been arriving within `spin` of the pool running out
// (common/poll_window.h: a moving average of the last ~8 gaps). A
// server whose calls come every few milliseconds never polls; an idle pool
// sleeps; a zero `spin` never polls. The transport's loop does the same for
// its sockets (see Note [Spin, then sleep],
// rpc/tensorpipe/guarded_tcp/event_loop.h).
//
// For the same cost, wake-ups go one at a time, with or without polling: a
// task posted while a thread polls, or while one woken earlier has not yet
// looked at the queue, wakes nobody; the thread that takes a task wakes the
// next if more are queued. A burst of 64 small calls used to wake every
// idle thread, one expensive wake-up each, while the first thread woken
// could have run them all; tasks that block still get a thread each, one
// wake-up after another.

namespace tessera {
namespace {
thread_local const ThreadPool* current_pool = nullptr;
}  // namespace

ThreadPool::ThreadPool(int num_threads, std::string name, int max_threads, absl::Duration spin)
    : name_(std::move(name)),
      num_threads_(num_threads),
      max_threads_(std::max(num_threads, max_threads)),
      next_task_(spin) {
  MutexLock lock(&mu_);
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) StartThread();
}

ThreadPool::~ThreadPool() { Shutdown(); }

void ThreadPool::Shutdown() {
  std::vector<std::thread> threads;
  stop_polling_.store(true);
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
    // No thread starts once stopping (UseSpareCapacity checks): the list is final.
    threads.swap(threads_);
  }
  for (auto& thread : threads) thread.join();
}

// A new thread counts as idle from the start, so a Post before it reaches
// its first wait does not start yet another.
void ThreadPool::StartThread() {
  ++idle_;
  threads_.emplace_back([this] {
    NameCurrentThread(name_);
    Loop();
  });
}

void ThreadPool::Post(std::function<void()> task) {
  MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  queued_.store(tasks_.size(), std::memory_order_release);
  NoteArrival();
  UseSpareCapacity();
}

bool ThreadPool::InPool() const { return current_pool == this; }

int ThreadPool::threads_started() const {
  MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

int64_t ThreadPool::polls() const {
  MutexLock lock(&mu_);
  return polls_;
}

int ThreadPool::sleeping_threads() const {
  MutexLock lock(&mu_);
  return idle_;
}

void ThreadPool::UseSpareCapacity() {
  if (tasks_.empty() || running_ >= num_threads_ || stopping_) return;
  // One wake-up at a time (see Note [Pool threads spin, then sleep]): a polling
  // thread, or one woken already, will look at the queue, and whoever takes
  // a task wakes the next thread if more wait (TakeTask).
  if (spinning_ > 0 || wake_pending_) return;
  if (idle_ > 0) {
    wake_pending_ = true;
    cv_.Signal();
  } else if (static_cast<int>(threads_.size()) < max_threads_) {
    wake_pending_ = true;
    StartThread();
  }
}

// See Note [Compensating blocked pool threads].
void ThreadPool::BeginBlocking() {
  MutexLock lock(&mu_);
  --running_;
  UseSpareCapacity();
}

void ThreadPool::EndBlocking() {
  MutexLock lock(&mu_);
  ++running_;
}

// See Note [Pool threads spin, then sleep].
void ThreadPool::NoteArrival() {
  if (ran_out_at_ns_ == 0) return;
  next_task_.NoteWaited(MonotonicNanos() - ran_out_at_ns_);
  ran_out_at_ns_ = 0;
}

bool ThreadPool::ShouldSpin() const {
  return spinning_ == 0 && tasks_.empty() && !stopping_ && next_task_.WorthPolling();
}

void ThreadPool::SpinUntilQueued() const {
  const int64_t until = MonotonicNanos() + next_task_.window_ns();
  while (queued_.load(std::memory_order_acquire) == 0 && !stop_polling_.load() &&
         MonotonicNanos() < until) {
    sched_yield();  // let a thread that shares this core run
  }
}

// A task may start when one is queued and fewer than num_threads_ run (a
// blocked one does not count); when stopping, queued work drains.
bool ThreadPool::TakeTask(std::function<void()>* task) {
  cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    wake_pending_ = false;  // an idle thread is looking at the queue
    return stopping_ || (!tasks_.empty() && running_ < num_threads_);
  });
  --idle_;
  if (tasks_.empty()) return false;  // stopping and drained
  *task = std::move(tasks_.front());
  tasks_.pop_front();
  queued_.store(tasks_.size(), std::memory_order_relaxed);
  ++running_;
  UseSpareCapacity();  // the next thread, if more tasks wait
  return true;
}

void ThreadPool::Loop() {
  current_pool = this;
  if (max_threads_ > num_threads_) current_blocking_observer = this;
  bool ran = false;
  while (true) {
    std::function<void()> task;
    bool spin = false;
    {
      MutexLock lock(&mu_);
      if (ran) {
        --running_;
        if (next_task_.enabled() && tasks_.empty() && ran_out_at_ns_ == 0) {
          ran_out_at_ns_ = MonotonicNanos();
        }
        spin = ShouldSpin();
        ++(spin ? spinning_ : idle_);
        if (spin) ++polls_;
      }
      if (!spin && !TakeTask(&task)) return;
    }
    if (spin) {
      SpinUntilQueued();
      MutexLock lock(&mu_);
      --spinning_;
      ++idle_;
      if (!TakeTask(&task)) return;
    }
    RunPostedTask(name_, task);
    ran = true;
  }
}

void NameCurrentThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

void RunPostedTask(const std::string& runner, const std::function<void()>& task) {
  try {
    task();
  } catch (const std::exception& e) {
    TESSERA_LOG(ERROR) << runner << ": task threw: " << e.what();
  }
}

}  // namespace tessera
