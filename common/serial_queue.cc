#include "common/serial_queue.h"

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/thread_pool.h"

namespace tessera {

struct SerialQueue::Core {
  struct Task {
    uint64_t ticket;
    std::function<void()> run;
  };

  explicit Core(std::string name) : name(std::move(name)) {}

  // Takes the front task if it may run now: nothing running, and (for a
  // waiter) the task is at or before `up_to`.
  bool TakeFront(uint64_t up_to, Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (running || tasks.empty() || tasks.front().ticket > up_to) return false;
    *task = std::move(tasks.front());
    tasks.pop_front();
    running = true;
    return true;
  }

  void Run(Task& task) {
    RunPostedTask(name, task.run);
    MutexLock lock(&mu);
    running = false;
    cv.SignalAll();  // the queue's thread may take the next one
  }

  const std::string name;
  Mutex mu;
  CondVar cv;
  std::deque<Task> tasks ABSL_GUARDED_BY(mu);
  uint64_t last_ticket ABSL_GUARDED_BY(mu) = 0;
  bool running ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool sleeping ABSL_GUARDED_BY(mu) = false;  // the thread waits on cv
};

namespace {
// Yields of an idle queue thread before it sleeps. Back-to-back collectives
// (a training loop's) then find it awake: no futex wake-up on Post. 200
// yields (~0.1-0.2 ms of an otherwise idle core) took the median 4-byte
// Gloo allreduce from ~135 to ~105 µs over 8 interleaved runs; 2000 did
// not do clearly better (docs/benchmarks-history.md).
constexpr int kIdleSpins = 200;
}  // namespace

SerialQueue::SerialQueue(std::string name)
    : core_(std::make_shared<Core>(std::move(name))), thread_([core = core_.get()] {
        NameCurrentThread(core->name);
        Loop(*core);
      }) {}

SerialQueue::~SerialQueue() {
  {
    MutexLock lock(&core_->mu);
    core_->stopping = true;
    core_->cv.SignalAll();
  }
  thread_.join();
}

uint64_t SerialQueue::Post(std::function<void()> task) {
  MutexLock lock(&core_->mu);
  const uint64_t ticket = ++core_->last_ticket;
  core_->tasks.push_back({ticket, std::move(task)});
  if (core_->sleeping) core_->cv.Signal();
  return ticket;
}

bool SerialQueue::RunInline(uint64_t ticket) {
  return RunInline(*core_, ticket, absl::InfiniteFuture());
}

bool SerialQueue::RunInline(Core& core, uint64_t ticket, absl::Time latest_start) {
  while (true) {
    Core::Task task;
    if (absl::Now() > latest_start) return false;
    {
      MutexLock lock(&core.mu);
      if (!core.TakeFront(ticket, &task)) {
        // Taken already when the front is past it (or nothing is queued).
        return core.tasks.empty() || core.tasks.front().ticket > ticket;
      }
    }
    core.Run(task);
    if (task.ticket == ticket) return true;
  }
}

std::function<void(absl::Time)> SerialQueue::InlineHook(uint64_t ticket,
                                                        absl::Duration longest_task) const {
  return [core = std::weak_ptr<Core>(core_), ticket, longest_task](absl::Time deadline) {
    if (auto alive = core.lock()) RunInline(*alive, ticket, deadline - longest_task);
  };
}

void SerialQueue::Loop(Core& core) {
  auto can_take = [&core]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !core.running && (!core.tasks.empty() || core.stopping);
  };
  int spins = 0;
  while (true) {
    Core::Task task;
    {
      MutexLock lock(&core.mu);
      const bool spin = !can_take() && spins < kIdleSpins;
      if (!spin) {
        core.sleeping = true;
        core.cv.Wait(&core.mu, can_take);
        core.sleeping = false;
        if (!core.TakeFront(UINT64_MAX, &task)) return;  // stopping and drained
      }
    }
    if (!task.run) {
      ++spins;
      std::this_thread::yield();
      continue;
    }
    spins = 0;
    core.Run(task);
  }
}

}  // namespace tessera
