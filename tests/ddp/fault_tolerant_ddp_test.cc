// Fault-tolerant DDP (ddp/fault_tolerant/fault_tolerant_ddp.h) as real
// processes under tessera-run: three replicas of the Fashion-MNIST example,
// one killed with SIGKILL at a random step.
//  - restarted (--elastic_roles replica): it rejoins at a step boundary
//    with a live peer's state, and every replica ends with the same
//    parameters (a fingerprint of their bytes: the claim itself, where an
//    undisturbed run's loss could only be near);
//  - not restarted: the quorum goes on without it (the step it was part of
//    is dropped and retried), and the two survivors end identical.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

constexpr char kProgram[] = "examples/fault_tolerant_ddp/fault_tolerant_ddp";

// Every "[replicaN] parameters <hash>" of `out`.
std::vector<std::string> Fingerprints(const std::string& out) {
  static const std::regex line("\\[replica\\d\\] parameters ([0-9a-f]+) after (\\d+) steps");
  std::vector<std::string> found;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    found.push_back((*it)[1].str() + " at " + (*it)[2].str());
  }
  return found;
}

class FaultTolerantDdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = absl::StrCat("ft-ddp-", getpid(), "-", ++runs_);
    setenv("TESSERA_TEST_JOB", job_.c_str(), 1);
  }

  // Starts 3 replicas for kSteps steps, kills replica 1 after a random
  // number (3-9) of progress lines, which every replica prints each 10
  // steps: 10-30 steps in, so it dies mid-run with most steps left to
  // rejoin for; returns the finished job's output.
  std::string RunAndKillReplica1(int max_restarts) {
    const unsigned seed = std::random_device{}();
    std::mt19937 random(seed);
    const int lines = std::uniform_int_distribution<int>(3, 9)(random);
    Launcher job({"--standalone", "--nproc_per_node", "3", "--elastic_roles", "replica",
                  "--max_restarts", std::to_string(max_restarts), kProgram, "--steps",
                  std::to_string(kSteps), "--log_every", "10", "--test_images", "2000"});
    EXPECT_TRUE(job.WaitFor("replicas\n", lines, absl::Seconds(180))) << "seed " << seed << "\n"
                                                                      << job.output();
    const pid_t pid = WorkerPid(job_, 1);
    EXPECT_GT(pid, 0) << job.output();
    if (pid > 0) ::kill(pid, SIGKILL);
    EXPECT_EQ(job.Finish(absl::Seconds(300)), 0) << "seed " << seed << "\n" << job.output();
    return job.output();
  }

  static constexpr int kSteps = 150;
  static inline int runs_ = 0;
  std::string job_;
};

TEST_F(FaultTolerantDdpTest, AKilledReplicaRejoinsFromALivePeerAndAllEndIdentical) {
  const std::string out = RunAndKillReplica1(/*max_restarts=*/1);
  EXPECT_TRUE(absl::StrContains(out, "restarting it alone (1/1)")) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[replica1\\] recovered the state at step "
                                                "[1-9]\\d* from a live peer")))
      << out;
  const std::vector<std::string> fingerprints = Fingerprints(out);
  ASSERT_EQ(fingerprints.size(), 3u) << out;
  EXPECT_EQ(std::set<std::string>(fingerprints.begin(), fingerprints.end()).size(), 1u) << out;
  EXPECT_TRUE(absl::EndsWith(fingerprints[0], absl::StrCat(" at ", kSteps)))
      << "every replica trained every step\n"
      << out;
}

TEST_F(FaultTolerantDdpTest, WithoutARestartTheOthersGoOnAndEndIdentical) {
  const std::string out = RunAndKillReplica1(/*max_restarts=*/0);
  EXPECT_TRUE(absl::StrContains(out, "the job goes on without it")) << out;
  EXPECT_TRUE(absl::StrContains(out, absl::StrCat("[replica0] step ", kSteps, "/", kSteps))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(absl::StrCat("\\[replica0\\] step \\d+/", kSteps,
                                                             ": loss [0-9.]+, 2 replicas"))))
      << "the quorum shrank to the two live replicas\n"
      << out;
  const std::vector<std::string> fingerprints = Fingerprints(out);
  ASSERT_EQ(fingerprints.size(), 2u) << out;
  EXPECT_EQ(fingerprints[0], fingerprints[1]) << out;
}

}  // namespace
}  // namespace tessera::testing
