// ThreadPool: a fixed set of threads running posted closures in FIFO order.
//
// Thread-safety: Post() may be called from any thread, including pool threads.
// The destructor drains queued work and joins the threads; it must not be
// called from a pool thread.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/executor.h"
#include "common/mutex.h"

namespace tessera {

class ThreadPool final : public Executor {
 public:
  ThreadPool(int num_threads, std::string name);
  ~ThreadPool() override;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::function<void()> task) override;

  // True when called from one of this pool's threads.
  bool InPool() const;

 private:
  void Loop();

  const std::string name_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// For threads that run posted tasks (ThreadPool, SerialQueue): names the
// calling thread `name` for top -H and perf (Linux keeps 15 characters).
void NameCurrentThread(const std::string& name);

// Runs `task`, logging an exception that escapes it under `runner`'s name:
// tasks report errors through futures, so an escaped one is a bug, but it
// must not take the process down with it.
void RunPostedTask(const std::string& runner, const std::function<void()>& task);

}  // namespace tessera
