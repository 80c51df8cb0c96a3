#include "common/thread_pool.h"

#include <pthread.h>

#include <utility>

#include "common/logging.h"

namespace tessera {
namespace {
thread_local const ThreadPool* current_pool = nullptr;
}  // namespace

ThreadPool::ThreadPool(int num_threads, std::string name)
    : name_(std::move(name)) {
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this] {
      // Named for top -H and perf (Linux allows 15 characters).
      pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
      Loop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  for (auto& thread : threads_) thread.join();
}

void ThreadPool::Post(std::function<void()> task) {
  MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  cv_.Signal();
}

bool ThreadPool::InPool() const { return current_pool == this; }

void ThreadPool::Loop() {
  current_pool = this;
  auto has_work = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || !tasks_.empty();
  };
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, has_work);
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      // Tasks report errors through futures; an escaped exception is a bug,
      // but it must not take the process down with it.
      TESSERA_LOG(ERROR) << name_ << ": task threw: " << e.what();
    }
  }
}

}  // namespace tessera
