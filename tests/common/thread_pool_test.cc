// Note [Compensating blocked pool threads]: a pool allowed to grow keeps
// num_threads running while tasks wait on futures; one that is not never
// runs more than num_threads tasks at once.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/future.h"

namespace tessera {
namespace {

// `waiters` tasks that each wait for a promise which only a task posted
// after all of them fulfils; returns how many of them saw it in time.
int WaitersThatSawTheLaterTask(ThreadPool& pool, int waiters, absl::Duration patience) {
  Promise<int> later;
  std::vector<Promise<bool>> saw(waiters);
  for (int i = 0; i < waiters; ++i) {
    pool.Post([&later, done = saw[i], patience]() mutable {
      done.Set(later.GetFuture().Wait(patience).ok());
    });
  }
  pool.Post([&later] { later.Set(1); });
  int count = 0;
  for (auto& done : saw) count += *done.GetFuture().Wait(patience + absl::Seconds(30)) ? 1 : 0;
  later.Set(0);  // in case the later task never ran (no-op otherwise)
  return count;
}

TEST(ThreadPoolTest, TasksWaitingOnLaterTasksDoNotStarveAGrowablePool) {
  ThreadPool pool(2, "grow", /*max_threads=*/8);
  EXPECT_EQ(WaitersThatSawTheLaterTask(pool, 4, absl::Seconds(30)), 4);
  // Four blocked, so up to four more started to keep two running.
  EXPECT_GT(pool.threads_started(), 2);
  EXPECT_LE(pool.threads_started(), 8);
}

TEST(ThreadPoolTest, GrowthStopsAtMaxThreads) {
  // Three tasks block until released, a fourth would mark that it ran. At
  // most three threads: all three are blocked, so the fourth must wait for
  // the release.
  ThreadPool pool(1, "capped", /*max_threads=*/3);
  Promise<int> release;
  std::vector<Promise<bool>> started(3);
  for (auto& s : started) {
    pool.Post([&release, s]() mutable {
      s.Set(true);
      (void)release.GetFuture().Wait(absl::Seconds(60));
    });
  }
  Promise<bool> fourth_ran;
  pool.Post([fourth_ran]() mutable { fourth_ran.Set(true); });
  for (auto& s : started) ASSERT_TRUE(s.GetFuture().Wait(absl::Seconds(30)).ok());
  // Only a fourth thread could run it now; none may start.
  EXPECT_FALSE(fourth_ran.GetFuture().Wait(absl::Milliseconds(200)).ok());
  EXPECT_EQ(pool.threads_started(), 3);
  release.Set(1);
  EXPECT_TRUE(fourth_ran.GetFuture().Wait(absl::Seconds(30)).ok());
  EXPECT_EQ(pool.threads_started(), 3);
}

TEST(ThreadPoolTest, APoolWithoutMaxThreadsNeverGrows) {
  // A one-thread pool runs its tasks strictly one at a time (collective
  // queues rely on it): a waiter is not overtaken by the task it waits for.
  ThreadPool pool(1, "serial");
  EXPECT_EQ(WaitersThatSawTheLaterTask(pool, 1, absl::Milliseconds(300)), 0);
  EXPECT_EQ(pool.threads_started(), 1);
}

}  // namespace
}  // namespace tessera
