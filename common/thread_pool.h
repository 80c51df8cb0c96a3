// ThreadPool: threads running posted closures in FIFO order, `num_threads`
// at a time.
//
// With `max_threads` above `num_threads`, a task that blocks waiting on a
// Future (see Note [Compensating blocked pool threads], common/blocking.h) has
// another thread take its place — an idle one, or a new one while the pool
// has fewer than `max_threads` — so tasks that wait for other tasks' results
// cannot starve the pool. Threads are only added, never retired early: the
// pool keeps its high-water mark, idle. Without it (the default) the pool
// never grows, and a one-thread pool runs its tasks strictly one at a time.
//
// With a nonzero `spin`, one thread that finds no task after running one
// polls for the next for up to `spin` before it sleeps — only while tasks
// have been arriving that fast (see Note [Pool threads spin, then sleep]).
//
// Thread-safety: Post() may be called from any thread, including pool threads.
// Shutdown() (and the destructor) drains queued work and joins the threads;
// it must not be called from a pool thread. A task posted after Shutdown()
// returned is never run (it is destroyed with the pool), so an owner whose
// other threads may still post (timers, transports) shuts the pool down
// first and destroys it only once those threads are gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/blocking.h"
#include "common/executor.h"
#include "common/mutex.h"
#include "common/poll_window.h"

namespace tessera {

class ThreadPool final : public Executor, private BlockingObserver {
 public:
  ThreadPool(int num_threads, std::string name, int max_threads = 0,
             absl::Duration spin = absl::ZeroDuration());
  ~ThreadPool() override;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::function<void()> task) override;
  // Drains queued work and joins the threads; idempotent.
  void Shutdown();

  // True when called from one of this pool's threads.
  bool InPool() const;
  // Threads started so far (for tests and logs).
  int threads_started() const;
  // Times a thread has polled for a task instead of sleeping, and threads
  // asleep waiting for one (for tests).
  int64_t polls() const;
  int sleeping_threads() const;

 private:
  void Loop();
  void BeginBlocking() override;
  void EndBlocking() override;
  // Wakes or starts a thread if a task waits and fewer than num_threads_
  // are running tasks — unless a thread polls, or one woken earlier has not
  // yet looked at the queue (one wake-up at a time).
  void UseSpareCapacity() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for a task as an idle thread; false when stopping and drained.
  bool TakeTask(std::function<void()>* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // See Note [Pool threads spin, then sleep].
  bool ShouldSpin() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SpinUntilQueued() const;
  void NoteArrival() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int num_threads_;
  const int max_threads_;
  // How long the next task took to come after the queue ran empty.
  PollWindow next_task_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // threads in a task and not blocked
  int idle_ ABSL_GUARDED_BY(mu_) = 0;     // threads waiting for a task
  int spinning_ ABSL_GUARDED_BY(mu_) = 0;  // threads polling for one (0 or 1)
  // A thread was woken (or started) for a task and has not yet looked at
  // the queue: no other wake-up until it has.
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  int64_t polls_ ABSL_GUARDED_BY(mu_) = 0;
  // tasks_.size(), read without the lock by a polling thread.
  std::atomic<size_t> queued_{0};
  std::atomic<bool> stop_polling_{false};  // set by Shutdown
  // When the pool last ran out of tasks (0: a task arrived since).
  int64_t ran_out_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// For threads that run posted tasks (ThreadPool, SerialQueue): names the
// calling thread `name` for top -H and perf (Linux keeps 15 characters).
void NameCurrentThread(const std::string& name);

// Runs `task`, logging an exception that escapes it under `runner`'s name:
// tasks report errors through futures, so an escaped one is a bug, but it
// must not take the process down with it.
void RunPostedTask(const std::string& runner, const std::function<void()>& task);

}  // namespace tessera
