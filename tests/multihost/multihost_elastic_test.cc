// Elastic jobs across separate network hosts. First a parameter-server
// job (see Note [Restarting a rank alone], launcher/elastic_restarts.h): the server on
// host 0, a trainer on each of hosts 1 and 2, one tessera-run per host.
// Each trainer is killed (SIGKILL) mid-epoch and restarted alone by its own
// host's launcher; it rejoins the server at its new address. A trainer
// joins from host 2 with tessera-run --join and is given batches. The
// server's process lives from start to end and the job learns. Then
// fault-tolerant DDP, a replica killed on its host (below).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/multihost/job.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

constexpr char kProgram[] = "examples/parameter_server/parameter_server";
constexpr char kStepLine[] = "] epoch 1 step ";

TEST(MultiHostElasticTest, TrainersKilledOnOtherHostsRejoinAndAJoinerFromAnotherHostHelps) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::string marker = absl::StrCat("multihost-elastic-", getpid());
  const Env env = {{"TESSERA_TEST_JOB", marker}};
  const std::vector<std::string> command = {kProgram,      "--epochs",      "1",
                                            "--max_steps", "500",           "--log_every",
                                            "20",          "--test_images", "2000"};
  auto job = Job::Launched(hosts, 1, command, env, "",
                           {"--elastic_roles", "trainer", "--max_restarts", "2"});
  ObservedProcess& server = job->on(0);
  ASSERT_TRUE(server.WaitFor("serving a CNN", 1, absl::Seconds(120))) << job->output();
  const int server_pid =
      static_cast<int>(FirstNumber(server.output(), "\\[ps\\] pid (\\d+) serving"));
  const int port =
      static_cast<int>(FirstNumber(server.output(), "rendezvous store at [0-9.]+:(\\d+)"));
  ASSERT_GT(port, 0) << job->output();

  // Kills the trainer of `rank` (on host `rank`) once it has logged a few
  // steps, and waits for the server to see its new incarnation.
  auto kill_and_await_rejoin = [&](int rank) {
    ObservedProcess& host = job->on(rank);
    ASSERT_TRUE(host.WaitFor(kStepLine, host.Count(kStepLine) + 2, absl::Seconds(120)))
        << job->output();
    const pid_t pid = WorkerPid(marker, rank);
    ASSERT_GT(pid, 0) << "no single live process of rank " << rank << "\n" << job->output();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    const std::string rejoined =
        absl::StrCat("trainer", rank, " (rank ", rank, ") rejoined, incarnation 1");
    ASSERT_TRUE(server.WaitFor(rejoined, 1, absl::Seconds(60)))
        << "waited for '" << rejoined << "'\n"
        << job->output();
  };
  kill_and_await_rejoin(1);
  Launcher joiner(
      {"--join", "--master_addr", hosts.address(0), "--master_port", std::to_string(port), kProgram,
       "--epochs", "1", "--max_steps", "500", "--log_every", "20", "--test_images", "2000"},
      hosts.On(2, JobEnv(env)));
  ASSERT_TRUE(server.WaitFor("trainer3 (rank 3) joined", 1, absl::Seconds(60)))
      << job->output() << joiner.output();
  kill_and_await_rejoin(2);

  EXPECT_EQ(job->Finish(absl::Seconds(300)), std::vector<int>(3, 0)) << job->output();
  EXPECT_EQ(joiner.Finish(absl::Seconds(60)), 0) << joiner.output();
  const std::string& out = server.output();
  EXPECT_EQ(server.Count("serving a CNN"), 1) << out;
  EXPECT_EQ(FirstNumber(out, "\\[ps\\] pid (\\d+): test accuracy"), server_pid) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("steps trained: 500 of 500 "))) << out;
  EXPECT_GT(FirstNumber(out, "steps trained: .*trainer3 (\\d+)"), 0) << out;
  EXPECT_GT(FirstNumber(out, "test accuracy ([0-9.]+)%"), 70.0) << out;
  std::printf("what the user saw:\n%s%s", job->output().c_str(), joiner.output().c_str());
}

// Fault-tolerant DDP across three hosts (ddp/fault_tolerant/): the replica
// on host 1 is killed mid-run and restarted alone by its host's launcher;
// it rejoins the quorum and recovers a live peer's state over Gloo between
// hosts, and every replica ends with the same parameters. Killed 50 steps
// in, it has 100 left to rejoin for.
TEST(MultiHostElasticTest, AFaultTolerantDdpReplicaKilledOnItsHostRecoversFromAPeer) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::string marker = absl::StrCat("multihost-ft-ddp-", getpid());
  auto job = Job::Launched(
      hosts, 1,
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--steps", "150", "--log_every", "25",
       "--test_images", "2000"},
      {{"TESSERA_TEST_JOB", marker}}, "", {"--elastic_roles", "replica", "--max_restarts", "1"});
  ObservedProcess& host1 = job->on(1);
  ASSERT_TRUE(host1.WaitFor("replicas\n", 2, absl::Seconds(180))) << job->output();
  const pid_t pid = WorkerPid(marker, 1);
  ASSERT_GT(pid, 0) << job->output();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(host1.WaitFor("[replica1] recovered the state at step", 1, absl::Seconds(120)))
      << job->output();
  EXPECT_EQ(job->Finish(absl::Seconds(300)), std::vector<int>(3, 0)) << job->output();
  const std::set<std::string> fingerprints = Fingerprints(*job, 3, 150);
  EXPECT_TRUE(fingerprints.size() == 1 && !fingerprints.count("none")) << job->output();
}

}  // namespace
}  // namespace tessera::testing
