#include "common/future.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/deadline_timer.h"
#include "common/thread_pool.h"

namespace tessera {
namespace {

TEST(FutureTest, CompletesExactlyOnce) {
  Promise<int> promise;
  EXPECT_TRUE(promise.Set(1));
  EXPECT_FALSE(promise.Set(2));
  EXPECT_FALSE(promise.Set(absl::InternalError("late")));
  EXPECT_EQ(*promise.GetFuture().Wait(absl::Seconds(1)), 1);
}

TEST(FutureTest, WaitTimesOutWhilePending) {
  Promise<int> promise;
  auto result = promise.GetFuture().Wait(absl::Milliseconds(20));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(promise.GetFuture().IsReady());
}

TEST(FutureTest, ThenChainsValuesStatusOrAndFutures) {
  Promise<int> promise;
  Promise<std::string> inner;
  auto chained = promise.GetFuture()
                     .Then([](const absl::StatusOr<int>& r) { return *r * 2; })
                     .Then([](const absl::StatusOr<int>& r) -> absl::StatusOr<int> {
                       return *r + 1;
                     })
                     .Then([inner](const absl::StatusOr<int>&) { return inner.GetFuture(); });
  promise.Set(20);
  EXPECT_FALSE(chained.IsReady());
  inner.Set("done");
  EXPECT_EQ(*chained.Wait(absl::Seconds(1)), "done");
}

TEST(FutureTest, ErrorsFlowThroughThen) {
  auto failed = Future<int>::Ready(absl::NotFoundError("x"))
                    .Then([](const absl::StatusOr<int>& r) -> absl::StatusOr<int> {
                      if (!r.ok()) return r.status();
                      return 0;
                    });
  EXPECT_EQ(failed.Wait(absl::Seconds(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST(FutureTest, CallbacksRunOnTheExecutorNotTheCompletingThread) {
  ThreadPool pool(1, "test");
  Promise<int> promise(&pool);
  Promise<bool> ran_in_pool;
  promise.GetFuture().OnReady(
      [&](const absl::StatusOr<int>&) { ran_in_pool.Set(pool.InPool()); });
  promise.Set(1);
  EXPECT_TRUE(*ran_in_pool.GetFuture().Wait(absl::Seconds(5)));
}

TEST(FutureTest, CallbackAddedAfterCompletionRunsInline) {
  auto ready = Future<int>::Ready(5);
  int seen = 0;
  ready.OnReady([&](const absl::StatusOr<int>& r) { seen = *r; });
  EXPECT_EQ(seen, 5);
}

TEST(FutureTest, ConcurrentSettersOnlyOneWins) {
  Promise<int> promise;
  std::atomic<int> wins{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { wins += promise.Set(i) ? 1 : 0; });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
}

TEST(DeadlineTimerTest, FiresInOrderAndCancelPreventsFiring) {
  DeadlineTimer timer;
  Promise<int> first, second, cancelled;
  const absl::Time now = absl::Now();
  timer.Schedule(now + absl::Milliseconds(30), [&] { second.Set(2); });
  timer.Schedule(now + absl::Milliseconds(10), [&] { first.Set(1); });
  auto id = timer.Schedule(now + absl::Milliseconds(20), [&] { cancelled.Set(3); });
  timer.Cancel(id);
  EXPECT_EQ(*first.GetFuture().Wait(absl::Seconds(5)), 1);
  EXPECT_EQ(*second.GetFuture().Wait(absl::Seconds(5)), 2);
  EXPECT_FALSE(cancelled.GetFuture().IsReady());
  EXPECT_EQ(timer.Schedule(absl::InfiniteFuture(), [] {}), 0u);
}

TEST(ThreadPoolTest, RunsEverythingPostedBeforeDestruction) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(2, "test");
    for (int i = 0; i < 1000; ++i) pool.Post([&] { count++; });
  }
  EXPECT_EQ(count.load(), 1000);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(DeadlineTimerTest, CancelWaitsForACallbackUnderWay) {
  DeadlineTimer timer;
  Promise<bool> entered;
  Promise<bool> release;
  std::atomic<bool> finished{false};
  auto id = timer.Schedule(absl::Now(), [&] {
    entered.Set(true);
    (void)release.GetFuture().Wait(absl::Seconds(30));
    finished = true;
  });
  ASSERT_TRUE(entered.GetFuture().Wait(absl::Seconds(10)).ok());
  std::thread releaser([&] { release.Set(true); });
  timer.Cancel(id);  // must not return while the callback runs
  EXPECT_TRUE(finished.load());
  releaser.join();
}

}  // namespace
}  // namespace tessera
