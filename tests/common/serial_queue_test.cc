#include "common/serial_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/future.h"
#include "common/mutex.h"

namespace tessera {
namespace {

// Records the order tasks ran in and on which threads.
class Recorder {
 public:
  void Ran(int task) {
    MutexLock lock(&mu_);
    order_.push_back(task);
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<int> order() {
    MutexLock lock(&mu_);
    return order_;
  }
  std::vector<std::thread::id> threads() {
    MutexLock lock(&mu_);
    return threads_;
  }

 private:
  Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

TEST(SerialQueueTest, NobodyWaitingTheQueueThreadRunsTasksInOrder) {
  Recorder recorder;
  Promise<int> last;
  {
    SerialQueue queue("test");
    for (int i = 0; i < 50; ++i) queue.Post([&recorder, i] { recorder.Ran(i); });
    queue.Post([last] { last.Set(1); });
    ASSERT_TRUE(last.GetFuture().Wait(absl::Seconds(10)).ok());
  }
  std::vector<int> expected(50);
  for (int i = 0; i < 50; ++i) expected[i] = i;
  EXPECT_EQ(recorder.order(), expected);
  for (auto id : recorder.threads()) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(SerialQueueTest, AWaiterDoesNotRunAheadOfARunningTask) {
  SerialQueue queue("test");
  Recorder recorder;
  Promise<int> started, gate, done;
  queue.Post([&] {
    started.Set(1);
    (void)gate.GetFuture().Wait(absl::Seconds(10));
    recorder.Ran(0);
  });
  ASSERT_TRUE(started.GetFuture().Wait(absl::Seconds(10)).ok());
  queue.Post([&] { recorder.Ran(1); });
  const uint64_t last = queue.Post([&] {
    recorder.Ran(2);
    done.Set(1);
  });
  EXPECT_FALSE(queue.RunInline(last));  // task 0 is running on the queue's thread
  gate.Set(1);
  ASSERT_TRUE(done.GetFuture().Wait(absl::Seconds(10)).ok());
  EXPECT_EQ(recorder.order(), (std::vector<int>{0, 1, 2}));
}

TEST(SerialQueueTest, WaitersRunTasksInlineInOrderExactlyOnce) {
  SerialQueue queue("test");
  Recorder recorder;
  constexpr int kTasks = 1000;
  for (int i = 0; i < kTasks; ++i) {
    Promise<int> done;
    const uint64_t ticket = queue.Post([&recorder, done, i] {
      recorder.Ran(i);
      done.Set(i);
    });
    done.SetWaitHook(queue.InlineHook(ticket, absl::Seconds(1)));
    ASSERT_EQ(*done.GetFuture().Wait(absl::Seconds(10)), i);
  }
  std::vector<int> expected(kTasks);
  for (int i = 0; i < kTasks; ++i) expected[i] = i;
  EXPECT_EQ(recorder.order(), expected);
  // The waiter takes the task unless the queue's thread woke up first;
  // over a thousand rounds it must have won some.
  int inline_runs = 0;
  for (auto id : recorder.threads()) inline_runs += id == std::this_thread::get_id();
  EXPECT_GT(inline_runs, 0);
}

TEST(SerialQueueTest, AWaiterWhoseDeadlineIsTooCloseLeavesTheTaskToTheQueue) {
  SerialQueue queue("test");
  for (int i = 0; i < 200; ++i) {
    Promise<std::thread::id> done;
    const uint64_t ticket = queue.Post([done] { done.Set(std::this_thread::get_id()); });
    // A task may take an hour; this waiter waits 10 s at most.
    done.SetWaitHook(queue.InlineHook(ticket, absl::Hours(1)));
    auto ran_on = done.GetFuture().Wait(absl::Seconds(10));
    ASSERT_TRUE(ran_on.ok());
    ASSERT_NE(*ran_on, std::this_thread::get_id());
  }
}

TEST(SerialQueueTest, AHookOutlivingItsQueueDoesNothing) {
  std::function<void(absl::Time)> hook;
  {
    SerialQueue queue("test");
    hook = queue.InlineHook(queue.Post([] {}), absl::Seconds(1));
  }
  hook(absl::InfiniteFuture());  // the queue (and its task) are gone; must not crash
}

TEST(FutureWaitHookTest, RunsOnceOnTheFirstWaiterWithItsDeadlineAndMayCompleteTheFuture) {
  Promise<int> promise;
  int runs = 0;
  absl::Time seen;
  promise.SetWaitHook([&](absl::Time deadline) {
    ++runs;
    seen = deadline;
    promise.Set(7);
  });
  EXPECT_EQ(runs, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  EXPECT_EQ(*promise.GetFuture().Wait(deadline), 7);
  EXPECT_EQ(seen, deadline);
  EXPECT_EQ(*promise.GetFuture().Wait(absl::Seconds(1)), 7);
  EXPECT_EQ(runs, 1);
}

TEST(FutureWaitHookTest, NotRunWhenTheFutureCompletesFirst) {
  Promise<int> promise;
  bool ran = false;
  promise.SetWaitHook([&](absl::Time) { ran = true; });
  promise.Set(1);
  EXPECT_EQ(*promise.GetFuture().Wait(absl::Seconds(1)), 1);
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace tessera
