// Elastic jobs across separate network hosts. First a parameter-server
// job (Note [Restarting a rank alone], launcher/elastic_restarts.h): the server on
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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/multihost/job.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

constexpr char kProgram[] = "examples/parameter_server/parameter_server";
constexpr char kStepLine[] = "] epoch 1 step ";

// The distinct parameter fingerprints that hosts [0, hosts) of a finished
// fault-tolerant DDP job printed after `steps` steps ("none" for a host
// that printed none): one when every replica ended identical.
std::set<std::string> Fingerprints(Job& job, int hosts, int steps) {
  std::set<std::string> found;
  const std::regex line(absl::StrCat("parameters ([0-9a-f]+) after ", steps, " steps"));
  for (int host = 0; host < hosts; ++host) {
    std::smatch match;
    const std::string& out = job.on(host).output();
    found.insert(std::regex_search(out, match, line) ? match[1].str() : "none");
  }
  return found;
}

TEST(MultiHostElasticTest, TrainersKilledOnOtherHostsRejoinAndAJoinerFromAnotherHostHelps) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::string marker = absl::StrCat("multihost-elastic-", getpid());
  const Env env = {{"TESSERA_TEST_JOB", marker}};
  const std::vector<std::string> command = {kProgram, "--epochs",    "1", "--max_steps",
                                            "500",    "--log_every", "20"};
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
       "--epochs", "1", "--max_steps", "500", "--log_every", "20"},
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

// The parameter-server job loses host 2 — its link down, its tessera-run
// and trainer SIGKILLed, as when a machine dies. The server notices the silent trainer
// (Note [Silent peers], guarded_tcp) and gives its batch to the other;
// node 0 declares node 2 lost (Note [Lost nodes]) and records rank 2 as
// left, so the server's graceful shutdown does not wait for it. The server
// never restarts, every batch is trained, and the job finishes on hosts 0
// and 1.
TEST(MultiHostElasticTest, AParameterServerJobThatLosesATrainersHostFinishes) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::vector<std::string> command = {kProgram, "--epochs",    "1", "--max_steps",
                                            "500",    "--log_every", "20"};
  auto job = Job::Launched(hosts, 1, command, {}, "",
                           {"--nnodes", "2:3", "--node_timeout", "10", "--elastic_roles", "trainer",
                            "--max_restarts", "2"});
  ObservedProcess& server = job->on(0);
  ASSERT_TRUE(server.WaitFor("serving a CNN", 1, absl::Seconds(120))) << job->output();
  ASSERT_TRUE(job->on(2).WaitFor(kStepLine, 3, absl::Seconds(120))) << job->output();
  // A machine that dies says nothing: its link goes first, so not even a
  // FIN gets out, then everything on it.
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  const absl::Time killed = absl::Now();
  ASSERT_EQ(::kill(job->on(2).pid(), SIGKILL), 0);
  ASSERT_TRUE(server.WaitFor("trainer2 (rank 2) failed", 1, absl::Seconds(60)))
      << "the server did not notice the silent trainer\n"
      << job->output();
  std::printf("the server noticed trainer 2's machine gone %.1f s after it died\n",
              absl::ToDoubleSeconds(absl::Now() - killed));
  for (int host = 0; host < 2; ++host) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(240)), 0) << job->output();
  }
  const std::string& out = server.output();
  EXPECT_EQ(server.Count("serving a CNN"), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "steps trained: 500 of 500 ")) << out;
  EXPECT_GT(FirstNumber(out, "test accuracy ([0-9.]+)%"), 70.0) << out;
  EXPECT_TRUE(absl::StrContains(out, "node 2 lost: not heard from for 10s")) << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// Fault-tolerant DDP across three hosts (ddp/fault_tolerant/): the replica
// on host 1 is killed mid-run and restarted alone by its host's launcher;
// it rejoins the quorum and recovers a live peer's state over Gloo between
// hosts, and every replica ends with the same parameters.
TEST(MultiHostElasticTest, AFaultTolerantDdpReplicaKilledOnItsHostRecoversFromAPeer) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::string marker = absl::StrCat("multihost-ft-ddp-", getpid());
  auto job = Job::Launched(
      hosts, 1,
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--steps", "200", "--log_every", "25"},
      {{"TESSERA_TEST_JOB", marker}}, "", {"--elastic_roles", "replica", "--max_restarts", "1"});
  ObservedProcess& host1 = job->on(1);
  ASSERT_TRUE(host1.WaitFor("replicas\n", 2, absl::Seconds(180))) << job->output();
  const pid_t pid = WorkerPid(marker, 1);
  ASSERT_GT(pid, 0) << job->output();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(host1.WaitFor("[replica1] recovered the state at step", 1, absl::Seconds(120)))
      << job->output();
  EXPECT_EQ(job->Finish(absl::Seconds(300)), std::vector<int>(3, 0)) << job->output();
  const std::set<std::string> fingerprints = Fingerprints(*job, 3, 200);
  EXPECT_TRUE(fingerprints.size() == 1 && !fingerprints.count("none")) << job->output();
}

// Fault-tolerant DDP across three hosts, host 2's link cut for 25 s (past
// every timeout of the job: Gloo's 10 s, the quorum's 3 s) and then healed
// (Note [No split brain], quorum.h). Replicas 0 and 1 go on as a quorum of
// two; replica 2 commits nothing while cut off — no quorum of one, no
// second model — and when the link is back it rejoins the quorum and
// catches up from a peer, without a restart of any process. Every replica
// ends with the same parameters.
TEST(MultiHostElasticTest, AFaultTolerantDdpReplicaCutOffFor25sRejoinsAndAllEndIdentical) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(
      hosts, 1,
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--steps", "600", "--log_every", "25"}, {},
      "", {"--elastic_roles", "replica", "--max_restarts", "1"});
  ObservedProcess& host2 = job->on(2);
  ASSERT_TRUE(host2.WaitFor("3 replicas\n", 2, absl::Seconds(180))) << job->output();
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  // The cut's length is the fault itself, not a wait for something.
  absl::SleepFor(absl::Seconds(25));
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/true).ok());
  const absl::Time healed = absl::Now();
  ASSERT_TRUE(host2.WaitFor("[replica2] recovered the state at step", 1, absl::Seconds(120)))
      << "replica 2 did not catch up after the link healed\n"
      << job->output();
  std::printf("replica 2 recovered its state %.1f s after the link healed\n",
              absl::ToDoubleSeconds(absl::Now() - healed));
  EXPECT_EQ(job->Finish(absl::Seconds(300)), std::vector<int>(3, 0)) << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(0).output(), ", 2 replicas\n"))
      << "replicas 0 and 1 did not train on while host 2 was cut off\n"
      << job->output();
  EXPECT_FALSE(absl::StrContains(job->output(), ", 1 replicas\n")) << "a replica trained alone\n"
                                                                   << job->output();
  EXPECT_FALSE(absl::StrContains(job->output(), "restarting")) << "a process restarted\n"
                                                               << job->output();
  const std::set<std::string> fingerprints = Fingerprints(*job, 3, 600);
  EXPECT_TRUE(fingerprints.size() == 1 && !fingerprints.count("none"))
      << "two models, or a replica unfinished\n"
      << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// Fault-tolerant DDP across three hosts, host 2 lost: every process on it
// SIGKILLed, its tessera-run included, as when a machine dies. Node 0
// declares it lost after --node_timeout (Note [Lost nodes]); with --nnodes
// 2:3 and replicas an elastic role the job goes on: the other two finish
// identical, and no launcher waits for the lost node's end.
TEST(MultiHostElasticTest, AFaultTolerantDdpJobThatLosesAHostFinishesOnTheOthers) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(
      hosts, 1,
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--steps", "400", "--log_every", "25"}, {},
      "",
      {"--nnodes", "2:3", "--node_timeout", "10", "--elastic_roles", "replica", "--max_restarts",
       "1"});
  ASSERT_TRUE(job->on(2).WaitFor("3 replicas\n", 2, absl::Seconds(180))) << job->output();
  // A machine that dies says nothing: its link goes first, so not even a
  // FIN gets out; then its tessera-run, the first process of its PID
  // namespace, and with it everything on the host.
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  ASSERT_EQ(::kill(job->on(2).pid(), SIGKILL), 0);
  for (int host = 0; host < 2; ++host) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(240)), 0)
        << "host " << host << " did not finish in time\n"
        << job->output();
  }
  const std::string& node0 = job->on(0).output();
  EXPECT_TRUE(absl::StrContains(node0, "node 2 lost: not heard from for 10s (--node_timeout)"))
      << job->output();
  EXPECT_TRUE(absl::StrContains(node0, "its ranks 2..2 are recorded as left")) << job->output();
  EXPECT_EQ(node0.find("not every node reported its end"), std::string::npos) << job->output();
  const std::set<std::string> fingerprints = Fingerprints(*job, 2, 400);
  EXPECT_TRUE(fingerprints.size() == 1 && !fingerprints.count("none")) << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// Host 2's link cut for longer than --node_timeout, then healed: node 0
// declares node 2 lost and the job goes on without it (--nnodes 2:3); when
// the link is back, host 2's launcher reads that verdict, stops its worker
// and exits naming it — the old replica does not train on under a rank
// the job gave up. The two others finish identical.
TEST(MultiHostElasticTest, ANodeDeclaredLostThatComesBackIsToldAndStops) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(
      hosts, 1,
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--steps", "600", "--log_every", "25"}, {},
      "",
      {"--nnodes", "2:3", "--node_timeout", "10", "--elastic_roles", "replica", "--max_restarts",
       "1"});
  ASSERT_TRUE(job->on(2).WaitFor("3 replicas\n", 2, absl::Seconds(180))) << job->output();
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  ASSERT_TRUE(job->on(0).WaitFor("node 2 lost: not heard from for 10s", 1, absl::Seconds(60)))
      << job->output();
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/true).ok());
  EXPECT_NE(job->on(2).Finish(absl::Seconds(120)), 0) << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(2).output(),
                                "node 0 declared this node lost and the job went on without it"))
      << job->output();
  for (int host = 0; host < 2; ++host) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(240)), 0) << job->output();
  }
  const std::set<std::string> fingerprints = Fingerprints(*job, 2, 600);
  EXPECT_TRUE(fingerprints.size() == 1 && !fingerprints.count("none")) << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

}  // namespace
}  // namespace tessera::testing
