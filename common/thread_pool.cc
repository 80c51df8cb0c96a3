#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace tessera {
namespace {
thread_local const ThreadPool* current_pool = nullptr;
}  // namespace

ThreadPool::ThreadPool(int num_threads, std::string name, int max_threads)
    : name_(std::move(name)),
      num_threads_(num_threads),
      max_threads_(std::max(num_threads, max_threads)) {
  MutexLock lock(&mu_);
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) StartThread();
}

ThreadPool::~ThreadPool() {
  std::vector<std::thread> threads;
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
  UseSpareCapacity();
}

bool ThreadPool::InPool() const { return current_pool == this; }

int ThreadPool::threads_started() const {
  MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void ThreadPool::UseSpareCapacity() {
  if (tasks_.empty() || running_ >= num_threads_ || stopping_) return;
  if (idle_ > 0) {
    cv_.Signal();
  } else if (static_cast<int>(threads_.size()) < max_threads_) {
    StartThread();
  }
}

// Note [Compensating blocked pool threads].
void ThreadPool::BeginBlocking() {
  MutexLock lock(&mu_);
  --running_;
  UseSpareCapacity();
}

void ThreadPool::EndBlocking() {
  MutexLock lock(&mu_);
  ++running_;
}

void ThreadPool::Loop() {
  current_pool = this;
  if (max_threads_ > num_threads_) current_blocking_observer = this;
  // A task may start when one is queued and fewer than num_threads_ run
  // (a blocked one does not count); when stopping, queued work drains.
  auto may_start = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || (!tasks_.empty() && running_ < num_threads_);
  };
  bool ran = false;
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      if (ran) {
        --running_;
        ++idle_;
      }
      cv_.Wait(&mu_, may_start);
      --idle_;
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
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
