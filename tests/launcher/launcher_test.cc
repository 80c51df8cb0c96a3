// tessera-run, run as a real process on real workers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/init.h"
#include "rpc/runtime.h"
#include "store/store_url.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

TEST(LauncherTest, SetsTheEnvironmentAndPrefixesOutput) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone", "/bin/sh", "-c",
                     "echo \"env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR "
                     "$TESSERA_STORE_HOSTED\""});
  EXPECT_EQ(launcher.Finish(), 0) << launcher.output();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(launcher.output(), absl::StrCat("[rank ", rank, "] env ", rank,
                                                                  " ", rank, " 3 3 127.0.0.1 1")))
        << launcher.output();
  }
}

// See Note [Worker malloc settings]: the workers get both thresholds, unless
// the launcher's environment sets malloc up or --tune_malloc=false.
TEST(LauncherTest, GivesTheWorkersMallocThresholdsUnlessTheUserSetThem) {
  const std::vector<std::string> print = {
      "--standalone", "/bin/sh", "-c",
      "echo \"malloc <$MALLOC_MMAP_THRESHOLD_> <$MALLOC_TRIM_THRESHOLD_>\""};
  Launcher tuned(print, {"/usr/bin/env", "-u", "MALLOC_MMAP_THRESHOLD_", "-u",
                         "MALLOC_TRIM_THRESHOLD_", "-u", "GLIBC_TUNABLES"});
  EXPECT_EQ(tuned.Finish(), 0) << tuned.output();
  EXPECT_TRUE(absl::StrContains(tuned.output(), "malloc <268435456> <268435456>"))
      << tuned.output();

  Launcher users(print, {"/usr/bin/env", "-u", "MALLOC_MMAP_THRESHOLD_", "-u", "GLIBC_TUNABLES",
                         "MALLOC_TRIM_THRESHOLD_=1000"});
  EXPECT_EQ(users.Finish(), 0) << users.output();
  EXPECT_TRUE(absl::StrContains(users.output(), "malloc <> <1000>")) << users.output();

  Launcher tunables(print, {"/usr/bin/env", "-u", "MALLOC_MMAP_THRESHOLD_", "-u",
                            "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES=glibc.malloc.arena_max=2"});
  EXPECT_EQ(tunables.Finish(), 0) << tunables.output();
  EXPECT_TRUE(absl::StrContains(tunables.output(), "malloc <> <>")) << tunables.output();

  std::vector<std::string> untuned = print;
  untuned.insert(untuned.begin(), "--tune_malloc=false");
  Launcher off(untuned,
               {"/usr/bin/env", "-u", "MALLOC_MMAP_THRESHOLD_", "-u", "MALLOC_TRIM_THRESHOLD_"});
  EXPECT_EQ(off.Finish(), 0) << off.output();
  EXPECT_TRUE(absl::StrContains(off.output(), "malloc <> <>")) << off.output();
}

TEST(LauncherTest, AFailedWorkerStopsTheOthersAndIsNamed) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone", "/bin/sh", "-c",
                     "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 600"});
  EXPECT_EQ(launcher.Finish(), 3) << launcher.output();  // bounded: the others were stopped
  EXPECT_TRUE(absl::StrContains(launcher.output(), "rank 1 failed with exit code 3"))
      << launcher.output();
}

// Restarts would not help: the launcher says what is missing and exits 127
// at once, as a shell would, without starting anything.
TEST(LauncherTest, AMissingProgramIsNamedAndNotRestarted) {
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "--max_restarts", "3",
                     "tessera-no-such-program", "--flag"});
  EXPECT_EQ(launcher.Finish(), 127) << launcher.output();
  EXPECT_TRUE(absl::StrContains(launcher.output(),
                                "cannot run 'tessera-no-such-program': not found in PATH"))
      << launcher.output();
  EXPECT_FALSE(absl::StrContains(launcher.output(), "restarting")) << launcher.output();
}

TEST(LauncherTest, MaxRestartsRestartsTheGroup) {
  const std::string marker = absl::StrCat(std::getenv("TEST_TMPDIR"), "/failed_once");
  unlink(marker.c_str());
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "--max_restarts", "1", "/bin/sh",
                     "-c",
                     "if [ $RANK = 0 ] && [ ! -e " + marker + " ]; then touch " + marker +
                         "; exit 1; fi; echo done-$RANK"});
  EXPECT_EQ(launcher.Finish(), 0) << launcher.output();
  EXPECT_TRUE(absl::StrContains(launcher.output(), "restarting the group (1/1)"));
  EXPECT_TRUE(absl::StrContains(launcher.output(), "[rank 0] done-0"));
}

TEST(LauncherTest, ForwardsSigterm) {
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "/bin/sh", "-c",
                     "trap 'echo got-TERM; exit 7' TERM; echo ready; "
                     "while :; do sleep 1; done"});
  ASSERT_TRUE(launcher.WaitFor("ready", 2)) << launcher.output();
  ::kill(launcher.pid(), SIGTERM);
  EXPECT_EQ(launcher.Finish(), 128 + SIGTERM) << launcher.output();
  EXPECT_EQ(launcher.Count("got-TERM"), 2) << launcher.output();
}

// A Tessera RPC job under tessera-run: workers meet through the launcher's
// store and call each other (the test binary is the worker program).
int RunLaunchedRpcWorker() {
  auto options = rpc::RpcOptions::TryFromEnv();
  if (!options.ok() || options->store_role != rpc::StoreRole::kConnect) return 1;
  auto runtime = rpc::TryInit(*options, MakeTestRegistry());
  if (!runtime.ok()) return 2;
  const int next = (options->rank + 1) % options->world_size;
  auto got =
      (*runtime)
          ->RpcAsync<int64_t>("worker" + std::to_string(next), "echo", int64_t{options->rank})
          .Wait(absl::Seconds(30));
  if (!got.ok()) {
    std::printf("worker%d: %s\n", options->rank, got.status().ToString().c_str());
    return 3;
  }
  std::printf("worker%d got %ld back from worker%d\n", options->rank, *got, next);
  std::fflush(stdout);
  return (*runtime)->TryShutdown().ok() && *got == options->rank ? 0 : 3;
}

TESSERA_WORKER_SCENARIO(launched_rpc) { return RunLaunchedRpcWorker(); }

// The same job, but rank 0 fails once at the end, after a complete run (the
// file named by FAILED_ONCE_MARKER remembers it).
TESSERA_WORKER_SCENARIO(launched_rpc_failing_once) {
  const int code = RunLaunchedRpcWorker();
  const char* marker = std::getenv("FAILED_ONCE_MARKER");
  if (code == 0 && std::getenv("RANK") == std::string("0") && access(marker, F_OK) != 0) {
    close(open(marker, O_CREAT | O_WRONLY, 0600));
    return 4;
  }
  return code;
}

TEST(LauncherTest, RunsATesseraJob) {
  Launcher launcher(
      {"--nproc_per_node", "3", "--standalone", SelfPath(), "--tessera_worker=launched_rpc"});
  EXPECT_EQ(launcher.Finish(), 0) << launcher.output();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(launcher.output(),
                                  absl::StrCat("[rank ", rank, "] worker", rank, " got ", rank,
                                               " back from worker", (rank + 1) % 3)))
        << launcher.output();
  }
}

// A restarted group meets afresh: the store forgets the entries of the
// group before (whose workers' addresses are dead), so the second attempt's
// calls reach the new workers.
TEST(LauncherTest, ARestartedRpcJobMeetsAfresh) {
  const std::string marker = absl::StrCat(std::getenv("TEST_TMPDIR"), "/rpc_failed_once");
  unlink(marker.c_str());
  setenv("FAILED_ONCE_MARKER", marker.c_str(), 1);
  Launcher launcher({"--nproc_per_node", "3", "--standalone", "--max_restarts", "1", SelfPath(),
                     "--tessera_worker=launched_rpc_failing_once"});
  EXPECT_EQ(launcher.Finish(), 0) << launcher.output();
  EXPECT_TRUE(absl::StrContains(launcher.output(), "restarting the group (1/1)"))
      << launcher.output();
  // Each rank's call succeeded in both attempts.
  EXPECT_EQ(launcher.Count("got 1 back from worker2"), 2) << launcher.output();
}

// Rank 1 fails once, at once, before meeting anyone (the file named by
// FAILED_ONCE_MARKER remembers it); otherwise the RPC job above.
TESSERA_WORKER_SCENARIO(launched_rpc_rank1_fails_first) {
  const char* marker = std::getenv("FAILED_ONCE_MARKER");
  if (std::getenv("RANK") == std::string("1") && access(marker, F_OK) != 0) {
    close(open(marker, O_CREAT | O_WRONLY, 0600));
    return 5;
  }
  return RunLaunchedRpcWorker();
}

// tessera-run's arguments for node `node_rank` of two on this machine, one
// worker each, running `command` (by default launched_rpc_rank1_fails_first);
// `flags` go to tessera-run too.
std::vector<std::string> TwoNodeArgs(const std::string& node_rank, const std::string& port,
                                     int max_restarts, std::vector<std::string> command = {},
                                     const std::vector<std::string>& flags = {}) {
  if (command.empty()) command = {SelfPath(), "--tessera_worker=launched_rpc_rank1_fails_first"};
  std::vector<std::string> args = {
      "--nnodes",         "2",  "--node_rank",    node_rank,
      "--nproc_per_node", "1",  "--master_addr",  "127.0.0.1",
      "--master_port",    port, "--max_restarts", std::to_string(max_restarts)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

// A fresh FAILED_ONCE_MARKER for launched_rpc_rank1_fails_first.
void FreshMarker(const std::string& name) {
  const std::string marker = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  unlink(marker.c_str());
  setenv("FAILED_ONCE_MARKER", marker.c_str(), 1);
}

// Two launchers on this machine, node 0 and node 1, meeting on a free port
// with a shared job secret (set for them, unset again at the end).
struct TwoNodes {
  explicit TwoNodes(int max_restarts, const std::vector<std::string>& command = {},
                    const std::vector<std::string>& flags = {})
      : port(SetSecretAndPickPort()),
        node0(TwoNodeArgs("0", port, max_restarts, command, flags)),
        node1(TwoNodeArgs("1", port, max_restarts, command, flags)) {}
  ~TwoNodes() { unsetenv("TESSERA_JOB_SECRET"); }
  static std::string SetSecretAndPickPort() {
    setenv("TESSERA_JOB_SECRET", "the two nodes' secret", 1);  // both launchers inherit it
    return std::to_string(FreeLoopbackPort());
  }
  const std::string port;
  Launcher node0;
  Launcher node1;
};

// Two nodes on this machine, one worker each (see Note [Restarting every
// node]): rank 1 on node 1 fails while rank 0 on node 0 waits for it. Node 0
// stops its worker too, both start the second attempt together on a cleared
// store, and it completes on both.
TEST(LauncherTest, AFailureOnOneNodeRestartsEveryNode) {
  FreshMarker("rank1_failed_once");
  TwoNodes nodes(/*max_restarts=*/1);
  Launcher& node0 = nodes.node0;
  Launcher& node1 = nodes.node1;
  EXPECT_EQ(node1.Finish(absl::Seconds(120)), 0) << node1.output();
  EXPECT_EQ(node0.Finish(absl::Seconds(120)), 0) << node0.output();
  EXPECT_TRUE(
      absl::StrContains(node0.output(), "another node reported: node 1: rank 1 exited with code 5"))
      << node0.output();
  for (const Launcher* launcher : {&node0, &node1}) {
    EXPECT_TRUE(absl::StrContains(launcher->output(), "restarting the group (1/1)"))
        << launcher->output();
  }
  // Only the second attempt's workers met.
  EXPECT_EQ(node0.Count("[rank 0] worker0 got 0 back from worker1"), 1) << node0.output();
  EXPECT_EQ(node1.Count("[rank 1] worker1 got 1 back from worker0"), 1) << node1.output();
}

// Without restarts, both nodes give up at once, node 0 naming the failure
// on node 1 (before, its worker waited out the RPC rendezvous timeout).
TEST(LauncherTest, AFailureOnOneNodeStopsEveryNode) {
  FreshMarker("rank1_failed_no_restart");
  TwoNodes nodes(/*max_restarts=*/0);
  EXPECT_EQ(nodes.node1.Finish(absl::Seconds(120)), 5) << nodes.node1.output();
  EXPECT_EQ(nodes.node0.Finish(absl::Seconds(120)), 1) << nodes.node0.output();
  EXPECT_TRUE(
      absl::StrContains(nodes.node0.output(), "giving up: node 1: rank 1 exited with code 5"))
      << nodes.node0.output();
}

// Node 1's launcher is interrupted: node 0 stops its workers at once and
// does not restart without node 1, saying why.
TEST(LauncherTest, AnInterruptedNodeStopsTheOthersForGood) {
  TwoNodes nodes(/*max_restarts=*/1, {"/bin/sh", "-c", "echo ready; while :; do sleep 1; done"});
  Launcher& node0 = nodes.node0;
  Launcher& node1 = nodes.node1;
  ASSERT_TRUE(node0.WaitFor("ready")) << node0.output();
  ASSERT_TRUE(node1.WaitFor("ready")) << node1.output();
  ::kill(node1.pid(), SIGTERM);
  EXPECT_EQ(node1.Finish(absl::Seconds(60)), 128 + SIGTERM) << node1.output();
  EXPECT_EQ(node0.Finish(absl::Seconds(60)), 1) << node0.output();
  EXPECT_TRUE(absl::StrContains(node0.output(), "node 1: interrupted by signal 15"))
      << node0.output();
  EXPECT_TRUE(absl::StrContains(node0.output(), "node 1 was interrupted in attempt 0"))
      << node0.output();
}

// A node whose workers finished ends and its launcher exits, so its
// heartbeats stop; node 0, whose rank 0 works on for longer than
// --node_timeout (a final evaluation, say), must not judge it lost and fail
// a job that finished everywhere. (The sleep is rank 0's work, not a wait
// for an event.)
TEST(LauncherTest, ANodeThatFinishedFirstIsNotDeclaredLost) {
  TwoNodes nodes(/*max_restarts=*/0,
                 {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then sleep 6; fi; echo finished"},
                 {"--node_timeout", "2"});
  EXPECT_EQ(nodes.node1.Finish(absl::Seconds(60)), 0) << nodes.node1.output();
  EXPECT_EQ(nodes.node0.Finish(absl::Seconds(60)), 0) << nodes.node0.output();
  EXPECT_FALSE(absl::StrContains(nodes.node0.output(), "lost")) << nodes.node0.output();
  EXPECT_TRUE(absl::StrContains(nodes.node0.output(), "[rank 0] finished")) << nodes.node0.output();
}

// The store on an etcd cluster (--store etcd://..., see Note [The store on
// etcd]): an RPC job meets through it; a fault-tolerant DDP job trains on
// while one of the three members is SIGKILLed, and leaves no key behind, so
// the same job name runs again; a job name whose keys another job left is
// refused, saying how to free it.
TEST(LauncherTest, JobsMeetThroughEtcdAndOutliveAMember) {
  auto etcd = EtcdCluster::StartLocal(3);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  Launcher rpc({"--nproc_per_node", "3", "--standalone", "--store", (*etcd)->Url("rpc"), SelfPath(),
                "--tessera_worker=launched_rpc"});
  EXPECT_EQ(rpc.Finish(), 0) << rpc.output();
  EXPECT_EQ(rpc.Count(" got "), 3) << rpc.output();

  const std::vector<std::string> ft_ddp = {"--nproc_per_node",
                                           "3",
                                           "--standalone",
                                           "--store",
                                           (*etcd)->Url("ft"),
                                           "--elastic_roles",
                                           "replica",
                                           "--max_restarts",
                                           "1",
                                           "examples/fault_tolerant_ddp/fault_tolerant_ddp",
                                           "--steps",
                                           "80",
                                           "--log_every",
                                           "25",
                                           "--test_images",
                                           "2000"};
  Launcher job(ft_ddp);
  ASSERT_TRUE(job.WaitFor("step 25/80", 3, absl::Seconds(120))) << job.output();
  (*etcd)->Kill(0);
  ASSERT_EQ(job.Finish(absl::Seconds(240)), 0) << job.output() << (*etcd)->Logs();
  EXPECT_EQ(job.Count("parameters "), 3) << job.output();
  const std::regex fingerprint("parameters ([0-9a-f]+) after 80 steps");
  std::set<std::string> fingerprints;
  for (auto it = std::sregex_iterator(job.output().begin(), job.output().end(), fingerprint);
       it != std::sregex_iterator(); ++it) {
    fingerprints.insert((*it)[1].str());
  }
  EXPECT_EQ(fingerprints.size(), 1u) << job.output();

  std::vector<std::string> again = ft_ddp;
  again[again.size() - 3] = "20";  // --steps
  Launcher rerun(again);
  EXPECT_EQ(rerun.Finish(absl::Seconds(120)), 0) << rerun.output();

  auto other_job = store::ConnectStore((*etcd)->Url("taken"), absl::Seconds(10), TestJobSecret());
  ASSERT_TRUE(other_job.ok() && (*other_job)->Set("left", "behind").ok());
  Launcher refused({"--standalone", "--store", (*etcd)->Url("taken"), "/bin/true"});
  EXPECT_EQ(refused.Finish(), 1) << refused.output();
  EXPECT_TRUE(absl::StrContains(refused.output(), "already holds 1 keys of another job"))
      << refused.output();
  EXPECT_TRUE(absl::StrContains(refused.output(), "del --prefix /tessera/taken/"))
      << refused.output();
}

// The DDP tutorial's ToyModel job, launched the way docs/guide/ddp.md says.
TEST(LauncherTest, RunsTheDdpToyExample) {
  const std::string checkpoint = absl::StrCat(std::getenv("TEST_TMPDIR"), "/toy.pt");
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "examples/ddp_toy/ddp_toy",
                     "--checkpoint", checkpoint});
  EXPECT_EQ(launcher.Finish(absl::Seconds(120)), 0) << launcher.output();
  EXPECT_EQ(launcher.Count("replica matches the checkpoint saved by rank 0"), 2)
      << launcher.output();
}

// Every program reads its flags with Abseil: --help lists each flag with its
// meaning and default (on standard output, exit status 0), and a misspelt flag is named with the nearest one
// instead of being ignored (ddp_fashion_mnist once took its epochs as a bare
// number, so `--epochs 1` trained zero epochs).
TEST(LauncherTest, EveryProgramHasHelpAndNamesTheNearestFlag) {
  const std::vector<std::pair<std::string, std::string>> programs = {
      {"launcher/tessera-run", "--nproc_per_node"},
      {"examples/parameter_server/parameter_server", "--optimizer"},
      {"examples/pipeline/pipeline", "--micro_batches"},
      {"examples/hybrid_ddp_rpc/hybrid_ddp_rpc", "--epochs"},
      {"examples/ddp_fashion_mnist/ddp_fashion_mnist", "--epochs"},
      {"examples/ddp_toy/ddp_toy", "--checkpoint"},
      {"examples/fault_tolerant_ddp/fault_tolerant_ddp", "--quorum_timeout_s"},
      {"examples/rpc_demo/rpc_demo", "--help"},
  };
  for (const auto& [program, flag] : programs) {
    // GNU's convention: help asked for goes to standard output, status 0.
    ObservedProcess help({"/bin/sh", "-c", program + " --help 2>/dev/null"});
    EXPECT_EQ(help.Finish(), 0) << program << help.output();
    EXPECT_NE(help.output().find("Try --helpfull"), std::string::npos) << program << help.output();
    if (flag != "--help") {
      EXPECT_NE(help.output().find(flag + " ("), std::string::npos) << program << help.output();
      EXPECT_NE(help.output().find("default: "), std::string::npos) << program << help.output();
      // Drop the last letter: the nearest known flag is the right one.
      ObservedProcess typo({program, flag.substr(0, flag.size() - 1), "1"});
      EXPECT_EQ(typo.Finish(), 2) << program << typo.output();
      EXPECT_NE(typo.output().find("did you mean " + flag + "?"), std::string::npos)
          << program << typo.output();
    }
  }
  ObservedProcess positional({"examples/ddp_fashion_mnist/ddp_fashion_mnist", "1"});
  EXPECT_EQ(positional.Finish(), 2) << positional.output();
  EXPECT_NE(positional.output().find("unexpected argument '1'"), std::string::npos)
      << positional.output();
}

}  // namespace
}  // namespace tessera::testing
