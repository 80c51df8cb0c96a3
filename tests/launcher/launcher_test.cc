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
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/runtime.h"
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
    EXPECT_TRUE(absl::StrContains(
        launcher.output(), absl::StrCat("[rank ", rank, "] env ", rank, " ", rank, " 3 3 127.0.0.1 1")))
        << launcher.output();
  }
}

TEST(LauncherTest, AFailedWorkerStopsTheOthersAndIsNamed) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone", "/bin/sh", "-c",
                     "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 600"});
  EXPECT_EQ(launcher.Finish(), 3) << launcher.output();  // bounded: the others were stopped
  EXPECT_TRUE(absl::StrContains(launcher.output(), "rank 1 failed with exit code 3"))
      << launcher.output();
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
TESSERA_WORKER_SCENARIO(launched_rpc) {
  auto options = rpc::RpcOptions::FromEnv();
  if (!options.ok() || options->store_role != rpc::StoreRole::kConnect) return 1;
  auto runtime = rpc::Runtime::Init(*options, MakeTestRegistry());
  if (!runtime.ok()) return 2;
  const int next = (options->rank + 1) % options->world_size;
  const int64_t got =
      (*runtime)->RpcSync<int64_t>("worker" + std::to_string(next), "echo", int64_t{options->rank});
  std::printf("worker%d got %ld back from worker%d\n", options->rank, got, next);
  std::fflush(stdout);
  return (*runtime)->Shutdown().ok() && got == options->rank ? 0 : 3;
}

TEST(LauncherTest, RunsATesseraJob) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  Launcher launcher({"--nproc_per_node", "3", "--standalone", self, "--tessera_worker=launched_rpc"});
  EXPECT_EQ(launcher.Finish(), 0) << launcher.output();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        launcher.output(),
        absl::StrCat("[rank ", rank, "] worker", rank, " got ", rank, " back from worker",
                     (rank + 1) % 3)))
        << launcher.output();
  }
}

// The DDP tutorial's ToyModel job, launched the way the README says.
TEST(LauncherTest, RunsTheDdpToyExample) {
  const std::string checkpoint = absl::StrCat(std::getenv("TEST_TMPDIR"), "/toy.pt");
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "examples/ddp_toy/ddp_toy",
                     checkpoint});
  EXPECT_EQ(launcher.Finish(absl::Seconds(120)), 0) << launcher.output();
  EXPECT_EQ(launcher.Count("replica matches the checkpoint saved by rank 0"), 2)
      << launcher.output();
}

// One epoch of the Fashion-MNIST DDP example: it trains (accuracy far above
// the 10% of chance). The full run (4 epochs, ~89%) is in the README.
TEST(LauncherTest, RunsTheFashionMnistDdpExampleForOneEpoch) {
  Launcher launcher({"--nproc_per_node", "2", "--standalone",
                     "examples/ddp_fashion_mnist/ddp_fashion_mnist", "1"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(600)), 0) << launcher.output();
  const auto at = launcher.output().find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << launcher.output();
  const double accuracy = std::atof(launcher.output().c_str() + at + 14);
  EXPECT_GT(accuracy, 75.0) << launcher.output();
}

}  // namespace
}  // namespace tessera::testing
