// The README's and the guide's examples run as they say: each under tessera-run with two
// workers, exiting 0 with the output the page shows.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

void RunsAndPrints(const std::string& example, const std::string& expected, int count = 1) {
  Launcher launcher({"--standalone", "--nproc_per_node", "2", "tests/readme/" + example});
  EXPECT_EQ(launcher.Finish(absl::Seconds(180)), 0) << launcher.output();
  EXPECT_EQ(launcher.Count(expected), count) << launcher.output();
}

TEST(ReadmeExamplesTest, Minimal) { RunsAndPrints("readme_minimal", "1 + 1 = 2, 2 + 1 = 3"); }

TEST(ReadmeExamplesTest, RRefs) {
  RunsAndPrints("readme_rrefs", "counter 15, tensor of 3, total 3");
}

TEST(ReadmeExamplesTest, DistributedAutogradLossFalls) {
  Launcher launcher({"--standalone", "--nproc_per_node", "2", "tests/readme/readme_dist_autograd"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(180)), 0) << launcher.output();
  // y = x.w with w = 0 starts at loss 2 (two rows of (0 - 1)^2), and SGD
  // on the server's weights brings it down.
  EXPECT_EQ(launcher.Count("step 0: loss 2.0000"), 1) << launcher.output();
  EXPECT_EQ(launcher.Count("step 4: loss 0."), 1) << launcher.output();
}

TEST(ReadmeExamplesTest, DdpJoinWithUnevenInputs) {
  Launcher launcher({"--standalone", "--nproc_per_node", "2", "tests/readme/readme_ddp_join"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(180)), 0) << launcher.output();
  // Both ranks leave with the same weights.
  const std::string& out = launcher.output();
  const auto first = out.find("rank 0: weight sum ");
  const auto second = out.find("rank 1: weight sum ");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_EQ(out.substr(first + 19, 7), out.substr(second + 19, 7)) << out;
}

TEST(ReadmeExamplesTest, MembershipSeesAWorkerLeave) {
  Launcher launcher({"--standalone", "--nproc_per_node", "3", "tests/readme/readme_membership"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(180)), 0) << launcher.output();
  EXPECT_EQ(launcher.Count("worker2 left; live: worker0, worker1"), 1) << launcher.output();
}

TEST(ReadmeExamplesTest, SharedTensorsAreTheSameMemory) {
  RunsAndPrints("readme_shared_tensors", "sent as a handle: yes; sum here now 33554432");
}

TEST(ReadmeExamplesTest, SharedTensorsForcedOntoTcpAreCopied) {
  Launcher launcher({"--standalone", "--nproc_per_node", "2", "tests/readme/readme_shared_tensors"},
                    {"/usr/bin/env", "TESSERA_TENSORPIPE_SAME_HOST=tcp"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(180)), 0) << launcher.output();
  EXPECT_EQ(launcher.Count("sent as a handle: no; sum here now 16777216"), 1) << launcher.output();
}

TEST(ReadmeExamplesTest, AShardedTableCountsPushes) {
  RunsAndPrints("readme_ps", "key 7: 2, key 42: 1");
}

}  // namespace
}  // namespace tessera::testing
