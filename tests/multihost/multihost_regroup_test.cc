// Jobs restarted as a group (DDP, pipelines, hybrid DDP + RPC; one process
// per network host) and a cluster's failures (see Note [Regrouping without
// lost nodes], launcher/node_coordinator.h): their workers cannot be let go
// as a parameter server's trainers can, so a lost machine restarts the
// group on the machines left (DDP, whose world may shrink), and a cut link
// that heals restarts it on all of them — each time from the last
// checkpoint, never from the beginning.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/multihost/job.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {
namespace {

// A job shape restarted as a group: its program, the host whose process
// writes the checkpoints and prints the accuracy, the name it prints, and
// a flag of its own (or none).
struct Shape {
  const char* name;
  const char* program;
  int writer_host;
  const char* who;
  const char* flag = nullptr;
};

constexpr Shape kDdp = {"ddp", "examples/ddp_fashion_mnist/ddp_fashion_mnist", 0, "ddp"};
constexpr Shape kPipeline = {"pipeline", "examples/pipeline/pipeline", 0, "driver"};
constexpr Shape kHybrid = {"hybrid", "examples/hybrid_ddp_rpc/hybrid_ddp_rpc", 1, "trainer1"};
// The transformer under a schedule of actions (PlanDriver), the backward
// split into B and W: a stage worker on each of hosts 1 and 2.
constexpr Shape kPlannedPipeline = {"planned_pipeline",
                                    "examples/pipeline_transformer/pipeline_transformer", 0,
                                    "driver", "--schedule=zb-h1"};

// `shape` on every host for 120 steps, checkpointing every 20 into a
// folder every host sees (as a cluster's shared file system), with
// `launcher_args`; returns once the writer has saved its second checkpoint
// (the fault comes then: the group resumes from step 40 or later and
// trains up to 80 steps more, enough to be judged by its accuracy: 76-81%
// here, against 78-82% after 200).
std::unique_ptr<Job> Start(NetworkHosts& hosts, const Shape& shape, const std::string& fault,
                           std::vector<std::string> launcher_args) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", shape.name, "-", fault);
  std::vector<std::string> command = {shape.program, "--epochs",           "1",  "--max_steps",
                                      "120",         "--log_every",        "20", "--checkpoint_dir",
                                      dir,           "--checkpoint_every", "20"};
  if (shape.flag != nullptr) command.push_back(shape.flag);
  auto job = Job::Launched(hosts, 1, std::move(command), {{"TESSERA_TIMEOUT_S", "10"}}, "",
                           std::move(launcher_args));
  EXPECT_TRUE(job->on(shape.writer_host)
                  .WaitFor(absl::StrCat("[", shape.who, "] checkpoint at epoch 1 step 40"), 1,
                           absl::Seconds(180)))
      << job->output();
  return job;
}

// Where the writer's resumed run began ("resuming from ... step S"), and
// the accuracy it reached.
void ExpectResumedFromACheckpoint(Job& job, const Shape& shape) {
  const std::string& out = job.on(shape.writer_host).output();
  EXPECT_GE(FirstNumber(out, "resuming from [^ ]* at epoch 1 step ([0-9]+)"), 40) << out;
  EXPECT_GT(FirstNumber(out, "test accuracy ([0-9.]+)%"), 60.0) << out;
}

// A lost machine for a shape whose world may shrink: the job on `hosts`
// hosts loses the last one; what the writer prints once the group runs on
// the others; the round's nodes as the launchers say them.
struct LostHost {
  Shape shape;
  int hosts;
  const char* regrouped;
  const char* runs_on;
};

constexpr LostHost kDdpLosesAHost = {kDdp, 3, "[ddp] 2 ranks",
                                     "this attempt runs on nodes 0,1: 2 ranks instead of 3"};
constexpr LostHost kHybridLosesATrainersHost = {
    kHybrid, 4, "embedding table for 2 trainers",
    "this attempt runs on nodes 0,1,2: 3 ranks instead of 4"};

class MultiHostLostHostTest : public ::testing::TestWithParam<LostHost> {};

// The last host is lost — its link down, then every process on it
// SIGKILLed, its tessera-run included. Node 0 declares it lost after
// --node_timeout; with --nnodes MIN:MAX one node may go, so the group
// restarts on the hosts left with one rank fewer (ranks renumbered),
// resumes from the last checkpoint and finishes.
TEST_P(MultiHostLostHostTest, RestartsTheGroupOnTheOthersFromTheCheckpoint) {
  const LostHost& test = GetParam();
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, test.hosts);
  const int lost = test.hosts - 1;
  auto job = Start(hosts, test.shape, "lost",
                   {"--nnodes", absl::StrCat(lost, ":", test.hosts), "--node_timeout", "10",
                    "--max_restarts", "1"});
  ASSERT_TRUE(hosts.SetLink(lost, /*up=*/false).ok());
  const absl::Time killed = absl::Now();
  ASSERT_EQ(::kill(job->on(lost).pid(), SIGKILL), 0);
  ObservedProcess& node0 = job->on(0);
  const std::string declared = absl::StrCat("node ", lost, " lost: ");
  ASSERT_TRUE(node0.WaitFor(declared, 1, absl::Seconds(60))) << job->output();
  std::printf("%s: node %d declared lost %.1f s after it died\n", test.shape.name, lost,
              absl::ToDoubleSeconds(absl::Now() - killed));
  const int writer = test.shape.writer_host;
  ASSERT_TRUE(job->on(writer).WaitFor("resuming from", 1, absl::Seconds(120)))
      << "the group did not restart on the hosts left\n"
      << job->output();
  std::printf("%s: training again %.1f s after host %d died\n", test.shape.name,
              absl::ToDoubleSeconds(absl::Now() - killed), lost);
  for (int host = 0; host < lost; ++host) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(240)), 0)
        << "host " << host << " did not finish in time\n"
        << job->output();
  }
  const std::string& out = node0.output();
  EXPECT_TRUE(absl::StrContains(out, declared + "not heard from for 10s (--node_timeout)"))
      << job->output();
  EXPECT_TRUE(absl::StrContains(out, "its workers cannot be let go")) << job->output();
  for (int host = 0; host < lost; ++host) {
    EXPECT_TRUE(absl::StrContains(job->on(host).output(), test.runs_on)) << job->output();
  }
  EXPECT_TRUE(absl::StrContains(job->output(), test.regrouped)) << job->output();
  EXPECT_EQ(out.find("not every node reported its end"), std::string::npos) << job->output();
  ExpectResumedFromACheckpoint(*job, test.shape);  // not from scratch
  std::printf("what the user saw:\n%s", job->output().c_str());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MultiHostLostHostTest,
                         ::testing::Values(kDdpLosesAHost, kHybridLosesATrainersHost),
                         [](const ::testing::TestParamInfo<LostHost>& info) {
                           return std::string(info.param.shape.name);
                         });

class MultiHostHealedCutTest : public ::testing::TestWithParam<Shape> {};

// Host 2's link is cut (past the job's 10 s timeouts, short of
// --node_timeout) and then heals: the job's collectives or calls time out,
// and the group restarts on all three hosts once host 2's launcher can
// report that its worker stopped; training resumes from the last
// checkpoint with every rank.
TEST_P(MultiHostHealedCutTest, RestartsTheGroupOnEveryHostFromTheCheckpoint) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const Shape& shape = GetParam();
  auto job =
      Start(hosts, shape, "cut", {"--nnodes", "3", "--node_timeout", "60", "--max_restarts", "2"});
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  const absl::Time cut = absl::Now();
  // The link stays cut until the group failed on the job's timeout,
  // however long a loaded machine takes to get there: host 0's launcher
  // restarts the group whether its own worker failed first or another
  // node reported its failure first (a race: either may come first).
  ASSERT_TRUE(job->on(0).WaitFor("restarting the group (1/2)", 1, absl::Seconds(120)))
      << "the group did not fail while host 2 was cut off\n"
      << job->output();
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/true).ok());
  const absl::Time healed = absl::Now();
  std::printf("%s: host 2's link was cut for %.1f s\n", shape.name,
              absl::ToDoubleSeconds(healed - cut));
  ASSERT_TRUE(job->on(shape.writer_host).WaitFor("resuming from", 1, absl::Seconds(120)))
      << "the group did not restart after the heal\n"
      << job->output();
  std::printf("%s: the group resumed %.1f s after the link healed\n", shape.name,
              absl::ToDoubleSeconds(absl::Now() - healed));
  EXPECT_EQ(job->Finish(absl::Seconds(240)), std::vector<int>(3, 0)) << job->output();
  for (int host = 0; host < 3; ++host) {
    EXPECT_TRUE(absl::StrContains(job->on(host).output(), "restarting the group (1/2)"))
        << job->output();
  }
  EXPECT_EQ(job->output().find("ranks instead of"), std::string::npos) << job->output();
  ExpectResumedFromACheckpoint(*job, shape);
  std::printf("what the user saw:\n%s", job->output().c_str());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MultiHostHealedCutTest,
                         ::testing::Values(kDdp, kPipeline, kPlannedPipeline, kHybrid),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace tessera::testing
