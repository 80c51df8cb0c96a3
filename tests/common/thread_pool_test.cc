// See Note [Compensating blocked pool threads]: a pool allowed to grow keeps
// num_threads running while tasks wait on futures; one that is not never
// runs more than num_threads tasks at once.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/future.h"

namespace tessera {
namespace {

// `waiters` tasks that each wait for a promise which only a task posted
// after all of them fulfils; returns how many of them saw it in time. The
// tasks hold the promise by value: the later one may run after this returns.
int WaitersThatSawTheLaterTask(ThreadPool& pool, int waiters, absl::Duration patience) {
  Promise<int> later;
  std::vector<Promise<bool>> saw(waiters);
  for (int i = 0; i < waiters; ++i) {
    pool.Post([later, done = saw[i], patience]() mutable {
      done.Set(later.GetFuture().Wait(patience).ok());
    });
  }
  pool.Post([later] { later.Set(1); });
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
    pool.Post([release, s]() mutable {
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

// `n` tasks that each finish only once all have started; true if they did.
bool RunAtOnce(ThreadPool& pool, int n) {
  auto started = std::make_shared<std::atomic<int>>(0);
  std::vector<Promise<bool>> all(n);
  for (auto& done : all) {
    pool.Post([started, done, n]() mutable {
      ++*started;
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (started->load() < n && absl::Now() < deadline) std::this_thread::yield();
      done.Set(started->load() == n);
    });
  }
  bool ok = true;
  for (auto& done : all) ok = *done.GetFuture().Wait(absl::Seconds(60)) && ok;
  return ok;
}

// One wake-up at a time, and each thread that takes a task wakes the next:
// a burst still gets a thread per task.
TEST(ThreadPoolTest, ABurstOfTasksGetsAThreadEach) {
  ThreadPool pool(4, "burst");
  EXPECT_TRUE(RunAtOnce(pool, 4));
  EXPECT_TRUE(RunAtOnce(pool, 4));  // with the threads started and asleep
}

// See Note [Pool threads spin, then sleep].
TEST(ThreadPoolTest, TasksPostedWhileAThreadPollsStillRunInParallel) {
  // A long window: a thread polls from the first task on. Two tasks run
  // first, so that both threads have started, and then one polls while the
  // other sleeps.
  ThreadPool pool(2, "poll", /*max_threads=*/0, /*spin=*/absl::Seconds(30));
  ASSERT_TRUE(RunAtOnce(pool, 2));
  const absl::Time settled_by = absl::Now() + absl::Seconds(30);
  while ((pool.polls() == 0 || pool.sleeping_threads() == 0) && absl::Now() < settled_by) {
    std::this_thread::yield();
  }
  ASSERT_EQ(pool.polls(), 1);  // and it polls for seconds yet
  ASSERT_EQ(pool.sleeping_threads(), 1);
  // The same two tasks again: one thread polling must not leave the second
  // queued behind the first.
  EXPECT_TRUE(RunAtOnce(pool, 2));
}

TEST(ThreadPoolTest, EveryTaskRunsWhilePostersRaceAPollingThread) {
  ThreadPool pool(3, "race", /*max_threads=*/0, /*spin=*/absl::Milliseconds(1));
  constexpr int kPosters = 4, kTasksEach = 2000;
  std::atomic<int> ran{0};
  std::vector<std::thread> posters;
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&pool, &ran] {
      for (int i = 0; i < kTasksEach; ++i) {
        pool.Post([&ran] { ++ran; });
        if (i % 7 == 0) std::this_thread::yield();  // bursts and gaps
      }
    });
  }
  for (auto& poster : posters) poster.join();
  Promise<bool> last;
  pool.Post([last]() mutable { last.Set(true); });
  ASSERT_TRUE(last.GetFuture().Wait(absl::Seconds(60)).ok());
  // FIFO: everything posted before `last` has at least started; drain.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ran.load() < kPosters * kTasksEach && absl::Now() < deadline) std::this_thread::yield();
  EXPECT_EQ(ran.load(), kPosters * kTasksEach);
}

TEST(ThreadPoolTest, APoolWhoseTasksComeSlowlyStopsPolling) {
  // Tasks 20 ms apart against a 2 ms window: the moving average of the gaps
  // passes the window within a few tasks, and then no thread polls.
  ThreadPool pool(2, "slow", /*max_threads=*/0, /*spin=*/absl::Milliseconds(2));
  int64_t polls_after_warm_up = 0;
  for (int i = 0; i < 30; ++i) {
    if (i == 10) polls_after_warm_up = pool.polls();
    Promise<bool> done;
    pool.Post([done]() mutable { done.Set(true); });
    ASSERT_TRUE(done.GetFuture().Wait(absl::Seconds(30)).ok());
    absl::SleepFor(absl::Milliseconds(20));  // the pace of the tasks, not a synchronisation
  }
  EXPECT_GT(polls_after_warm_up, 0);  // it did poll while the average was short
  EXPECT_EQ(pool.polls(), polls_after_warm_up);
}

TEST(ThreadPoolTest, AnIdlePoolSleepsAfterItsWindow) {
  ThreadPool pool(2, "idle", /*max_threads=*/0, /*spin=*/absl::Milliseconds(20));
  Promise<bool> done;
  pool.Post([done]() mutable { done.Set(true); });
  ASSERT_TRUE(done.GetFuture().Wait(absl::Seconds(30)).ok());
  // The thread that ran it polls for its window, then joins the other one
  // asleep; a thread that kept polling would never be counted asleep.
  const absl::Time asleep_by = absl::Now() + absl::Seconds(30);
  while (pool.sleeping_threads() < 2 && absl::Now() < asleep_by) std::this_thread::yield();
  EXPECT_EQ(pool.sleeping_threads(), 2);
  EXPECT_EQ(pool.polls(), 1);
}

}  // namespace
}  // namespace tessera
