// Elastic parameter-server jobs (see Note [Restarting a rank alone],
// launcher/elastic_restarts.h; see Note [Elastic membership], rpc/runtime.h),
// as real processes under tessera-run: trainers killed with SIGKILL at
// random steps are restarted alone and rejoin, a trainer joining mid-run
// is given batches, and the server never restarts (one process from start
// to end) — and every batch of the plan is trained: acknowledged exactly
// once, its forward pass run once, or twice for a batch whose trainer was
// killed after its forward (at most one a kill).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

constexpr char kProgram[] = "examples/parameter_server/parameter_server";
constexpr char kStepLine[] = "] epoch 1 step ";

class ElasticParameterServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Shared by the job and the launcher that joins it (a child inherits it).
    setenv("TESSERA_JOB_SECRET", "elastic-parameter-server-test-secret-0123456789", 1);
    job_ = absl::StrCat("elastic-ps-", getpid());
    setenv("TESSERA_TEST_JOB", job_.c_str(), 1);
  }

  // Waits for `count` more step lines of the job's trainers, then kills
  // `rank`'s worker with SIGKILL and waits for its next incarnation to rejoin.
  void KillAfterSteps(Launcher& job, int steps, int rank, int incarnation) {
    const int target = job.Count(kStepLine) + steps;
    ASSERT_TRUE(job.WaitFor(kStepLine, target, absl::Seconds(120)))
        << "waited for " << target << " step lines\n"
        << job.output();
    const pid_t pid = WorkerPid(job_, rank);
    ASSERT_GT(pid, 0) << "no single live process of rank " << rank << "\n" << job.output();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    const std::string rejoined =
        absl::StrCat("trainer", rank, " (rank ", rank, ") rejoined, incarnation ", incarnation);
    ASSERT_TRUE(job.WaitFor(rejoined, 1, absl::Seconds(60))) << "waited for '" << rejoined << "'\n"
                                                             << job.output();
  }

  std::string job_;
};

TEST_F(ElasticParameterServerTest, KilledTrainersRejoinAJoiningTrainerHelpsAndTheServerLivesOn) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("random seed ", seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> lines(2, 8);  // 20 steps each

  // Room for the kills (up to 2 x 160 steps in, plus each rejoin and the
  // joiner's start) with batches left after them: 85% of an epoch.
  constexpr int kSteps = 800;
  Launcher job({"--standalone", "--nproc_per_node", "3", "--elastic_roles", "trainer",
                "--max_restarts", "3", kProgram, "--epochs", "1", "--max_steps",
                std::to_string(kSteps), "--log_every", "20", "--test_images", "2000"});
  ASSERT_TRUE(job.WaitFor("serving a CNN", 1, absl::Seconds(120))) << job.output();
  const int port =
      static_cast<int>(FirstNumber(job.output(), "rendezvous store at [0-9.]+:(\\d+)"));
  const int server_pid = static_cast<int>(FirstNumber(job.output(), "\\[ps\\] pid (\\d+) serving"));
  ASSERT_GT(port, 0) << job.output();

  KillAfterSteps(job, lines(random), /*rank=*/1, /*incarnation=*/1);
  Launcher joiner({"--join", "--master_port", std::to_string(port), "--nproc_per_node", "1",
                   kProgram, "--epochs", "1", "--max_steps", std::to_string(kSteps), "--log_every",
                   "20", "--test_images", "2000"});
  ASSERT_TRUE(job.WaitFor("trainer3 (rank 3) joined", 1, absl::Seconds(60)))
      << job.output() << joiner.output();
  KillAfterSteps(job, lines(random), /*rank=*/2, /*incarnation=*/1);

  ASSERT_EQ(job.Finish(absl::Seconds(300)), 0) << job.output();
  ASSERT_EQ(joiner.Finish(absl::Seconds(60)), 0) << joiner.output();
  const std::string& out = job.output();
  EXPECT_EQ(job.Count("serving a CNN"), 1) << out;
  EXPECT_EQ(job.Count("restarting the group"), 0) << out;
  EXPECT_EQ(FirstNumber(out, "\\[ps\\] pid (\\d+): test accuracy"), server_pid) << out;
  EXPECT_TRUE(absl::StrContains(out, absl::StrCat("steps trained: ", kSteps, " of ", kSteps, " ")))
      << "every batch acknowledged once\n"
      << out;
  EXPECT_GT(FirstNumber(out, "steps trained: .*trainer3 (\\d+)"), 0) << "the joiner trained\n"
                                                                     << out;
  // Nothing lost, nothing trained twice but the batches cut short by the
  // two kills (a batch whose forward ran before its trainer died).
  const double forwards = FirstNumber(out, "forward passes: (\\d+)");
  EXPECT_GE(forwards, kSteps) << out;
  EXPECT_LE(forwards, kSteps + 2) << out;
}

// The same over the gRPC backend: its agent too drops the old incarnation's
// stream and dials the new address.
TEST_F(ElasticParameterServerTest, AKilledTrainerRejoinsOverGrpc) {
  setenv("TESSERA_RPC_BACKEND", "grpc", 1);
  Launcher job({"--standalone", "--nproc_per_node", "3", "--elastic_roles", "trainer",
                "--max_restarts", "1", kProgram, "--epochs", "1", "--max_steps", "300",
                "--log_every", "20", "--test_images", "2000"});
  unsetenv("TESSERA_RPC_BACKEND");
  ASSERT_TRUE(job.WaitFor("serving a CNN", 1, absl::Seconds(120))) << job.output();
  const int server_pid = static_cast<int>(FirstNumber(job.output(), "\\[ps\\] pid (\\d+) serving"));
  KillAfterSteps(job, 3, /*rank=*/1, /*incarnation=*/1);
  ASSERT_EQ(job.Finish(absl::Seconds(300)), 0) << job.output();
  EXPECT_EQ(FirstNumber(job.output(), "\\[ps\\] pid (\\d+): test accuracy"), server_pid)
      << job.output();
  EXPECT_TRUE(std::regex_search(job.output(), std::regex("steps trained: 300 of 300 ")))
      << job.output();
}

// A trainer that leaves early (Worker::Leave) is not waited for: the others
// train its share and the job ends normally. With --max_ranks 4, that
// joiner took the last rank: a second one is refused, naming the bound.
TEST_F(ElasticParameterServerTest, ATrainerThatLeavesEarlyIsNotWaitedFor) {
  Launcher job({"--standalone", "--nproc_per_node", "3", "--elastic_roles", "trainer",
                "--max_ranks", "4", kProgram, "--epochs", "1", "--max_steps", "300", "--log_every",
                "50", "--test_images", "2000"});
  ASSERT_TRUE(job.WaitFor("serving a CNN", 1, absl::Seconds(120))) << job.output();
  const int port =
      static_cast<int>(FirstNumber(job.output(), "rendezvous store at [0-9.]+:(\\d+)"));
  Launcher leaver({"--join", "--master_port", std::to_string(port), kProgram, "--epochs", "1",
                   "--max_steps", "300", "--leave_after_steps", "20"});
  ASSERT_EQ(leaver.Finish(absl::Seconds(120)), 0) << leaver.output();
  EXPECT_EQ(leaver.Count("leaving the job after 20 steps"), 1) << leaver.output();
  Launcher refused({"--join", "--master_port", std::to_string(port), kProgram});
  EXPECT_EQ(refused.Finish(absl::Seconds(60)), 1) << refused.output();
  EXPECT_EQ(refused.Count("the job allows at most 4 ranks (its --max_ranks) and has had 4"), 1)
      << refused.output();
  ASSERT_EQ(job.Finish(absl::Seconds(300)), 0) << job.output();
  EXPECT_EQ(job.Count("trainer3 (rank 3) left"), 1) << job.output();
  EXPECT_TRUE(
      std::regex_search(job.output(), std::regex("steps trained: 300 of 300 .*trainer3 20")))
      << job.output();
}

}  // namespace
}  // namespace tessera::testing
