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
      NameCurrentThread(name_);
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
    RunPostedTask(name_, task);
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
