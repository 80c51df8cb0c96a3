// Faults across separate network hosts: a cut link, a launcher killed with
// its host's workers, a worker killed while the others wait in Shutdown().
// Each failure must be named (who, where, why) within a bound, never waited
// out. Worker programs are this binary (--tessera_worker=<scenario>); each
// test runs as root (CI does) and skips elsewhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/init.h"
#include "rpc/runtime.h"
#include "tests/multihost/job.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/network_hosts.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

// Rank 1 calls both others until a call fails, then names the failure
// (the link-cut test).
TESSERA_WORKER_SCENARIO(multihost_until_failure) {
  auto runtime = rpc::TryInit(TestWorkerOptions(), MakeTestRegistry());
  if (!runtime.ok()) return 2;
  rpc::Runtime& rt = **runtime;
  if (rt.self().rank != 1) {
    // Serve until the launcher stops this worker.
    for (;;) absl::SleepFor(absl::Seconds(1));
  }
  for (int64_t round = 0;; ++round) {
    for (const char* peer : {"worker0", "worker2"}) {
      // The call's own deadline fires first; Wait's is a backstop.
      auto got = rt.RpcAsync<int64_t>(rpc::CallOptions{absl::Seconds(5)}, peer, "echo", round)
                     .Wait(absl::Seconds(30));
      if (!got.ok()) {
        std::printf("call failed: %s\n", got.status().ToString().c_str());
        std::fflush(stdout);
        return 3;
      }
    }
    if (round == 10) {
      std::printf("calls flowing\n");
      std::fflush(stdout);
    }
  }
}

// Rank 0 shuts down at once and waits for the others; rank 1 dies (SIGKILL)
// once rank 0 waits; rank 2 shuts down too. See Note [Shutdown liveness]: the
// waiters name the dead worker instead of waiting for it.
TESSERA_WORKER_SCENARIO(multihost_dies_before_shutdown) {
  const char* rank_env = std::getenv("RANK");
  if (rank_env != nullptr && std::string(rank_env) == "1") {
    // The worker runs in a child: this process is PID 1 of its host's PID
    // namespace, which signals from inside cannot kill. (No thread yet.)
    const pid_t child = fork();
    if (child < 0) return 2;
    if (child > 0) {
      int status = 0;
      waitpid(child, &status, 0);
      return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
  }
  auto options = rpc::RpcOptions::TryFromEnv();
  if (!options.ok()) return 2;
  options->shutdown_timeout = absl::Minutes(10);  // far beyond the test's bound
  auto runtime = rpc::TryInit(*options, MakeTestRegistry());
  if (!runtime.ok()) return 2;
  const int rank = (*runtime)->self().rank;
  if (rank == 1) {
    // Rank 0's first shutdown round: it is waiting for the others now.
    (void)(*runtime)->store().Get("tessera/shutdown/0/0", absl::Seconds(60));
    raise(SIGKILL);
  }
  const absl::Status shutdown = (*runtime)->TryShutdown();
  std::printf("rank %d shutdown: %s\n", rank, shutdown.ToString().c_str());
  std::fflush(stdout);
  return shutdown.ok() ? 0 : 4;
}

// The link of host 2 is cut while calls flow: the caller names the peer,
// its address and the deadline; every launcher exits non-zero within
// --rdzv_timeout, and nothing is left running on any host.
TEST(MultiHostTest, ACutLinkFailsEveryHostWithANamedCause) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_until_failure"}, {},
                           "", {"--rdzv_timeout", "15"});
  ASSERT_TRUE(job->on(1).WaitFor("calls flowing")) << job->output();
  ASSERT_TRUE(hosts.SetLink(2, /*up=*/false).ok());
  const std::vector<int> codes = job->Finish(absl::Seconds(120));
  for (int host = 0; host < 3; ++host) EXPECT_NE(codes[host], 0) << job->output();
  const std::string& driver = job->on(1).output();
  EXPECT_TRUE(absl::StrContains(
      driver, absl::StrCat("call failed: DEADLINE_EXCEEDED: call to worker 'worker2' (rank 2) at "
                           "tcp://",
                           hosts.address(2))))
      << job->output();
  EXPECT_TRUE(absl::StrContains(driver, "'echo' got no response within 5")) << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(2).output(),
                                "lost contact with the rendezvous store at " + hosts.address(0)))
      << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// Host 1's launcher is killed (SIGKILL: a machine gone, with its workers):
// the other host declares it lost after --node_timeout (see Note [Lost nodes])
// and, with --nnodes 2 (no node may be lost), stops naming it; Finish's
// bound turns a hang into a failure.
TEST(MultiHostTest, ALostHostBelowTheMinimumStopsTheOthersNamingIt) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Launched(hosts, 1, {"/bin/sh", "-c", "echo ready; while :; do sleep 1; done"}, {},
                           "", {"--node_timeout", "10"});
  ASSERT_TRUE(job->on(0).WaitFor("ready")) << job->output();
  ASSERT_TRUE(job->on(1).WaitFor("ready")) << job->output();
  ::kill(job->on(1).pid(), SIGKILL);
  EXPECT_EQ(job->on(0).Finish(absl::Seconds(60)), 1) << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(0).output(),
                                "node 1 lost: not heard from for 10s (--node_timeout), last at "))
      << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(0).output(),
                                "1 nodes left, fewer than the 2 required (--nnodes MIN:MAX)"))
      << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// A worker on another host is killed while the others wait in Shutdown():
// rank 0 names it (its address on host 1, the refused connection) within
// the test's bound, though the shutdown deadline is ten minutes. Rank 0
// hosts the store: rank 2 either hears rank 0's verdict there or, once rank
// 0 exited, gets no answers from it and gives up within the job's budget for
// them (TESSERA_RDZV_TIMEOUT_S, see Note [Slow is not failed]); either way it
// exits by itself, naming the cause.
TEST(MultiHostTest, AWorkerKilledBeforeShutdownIsNamedNotWaitedFor) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Direct(hosts, {SelfPath(), "--tessera_worker=multihost_dies_before_shutdown"},
                         [&](int host, const std::string& port) {
                           return Env{{"MASTER_ADDR", hosts.address(0)},
                                      {"MASTER_PORT", port},
                                      {"WORLD_SIZE", "3"},
                                      {"RANK", std::to_string(host)},
                                      {"TESSERA_RDZV_TIMEOUT_S", "10"}};
                         });
  const std::vector<int> codes = job->Finish(absl::Seconds(120));
  EXPECT_EQ(codes[0], 4) << job->output();
  EXPECT_EQ(codes[1], 128 + SIGKILL) << job->output();
  EXPECT_EQ(codes[2], 4) << "rank 2 did not end its shutdown by itself\n" << job->output();
  // Rank 2 hears rank 0's verdict through the store if it polls before rank
  // 0 exits (see Note [Shutdown liveness]), else it names the store gone silent:
  // which comes first is a race, and either names the cause.
  const std::string& third = job->on(2).output();
  const bool named_store = absl::StrContains(
      third, absl::StrCat("rank 2 shutdown: DEADLINE_EXCEEDED: store ", hosts.address(0)));
  const bool heard_verdict =
      absl::StrContains(third, absl::StrCat("rank 2 shutdown: UNAVAILABLE: graceful shutdown: "
                                            "worker 'worker1' (rank 1) is gone (worker 'worker1' "
                                            "(rank 1) at tcp://",
                                            hosts.address(1))) &&
      absl::StrContains(third, "(found by rank 0)");
  EXPECT_TRUE(named_store || heard_verdict) << job->output();
  EXPECT_TRUE(absl::StrContains(
      job->on(0).output(),
      absl::StrCat("rank 0 shutdown: UNAVAILABLE: graceful shutdown: worker 'worker1' (rank 1) "
                   "is gone (worker 'worker1' (rank 1) at tcp://",
                   hosts.address(1))))
      << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

}  // namespace
}  // namespace tessera::testing
