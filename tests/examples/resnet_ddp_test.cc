// The ResNet DDP example, short, under tessera-run with two ranks: the
// epoch runs (40 steps of it), the loss falls, and rank 0 reports the
// epoch's time and test accuracy (the full run is in docs/guide/job-shapes.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(ResnetDdpExampleTest, AShortEpochRunsAndLossFalls) {
  Launcher launcher({"--nproc_per_node", "2", "--standalone", "examples/resnet_ddp/resnet_ddp",
                     "--epochs", "1", "--max_steps", "40", "--log_every", "10", "--test_images",
                     "500"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(600)), 0) << launcher.output();
  const std::string& out = launcher.output();
  const std::regex line("\\[rank0\\] epoch 1 step \\d+/40: loss ([0-9.]+)");
  std::vector<double> losses;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    losses.push_back(std::atof((*it)[1].str().c_str()));
  }
  ASSERT_EQ(losses.size(), 4u) << out;
  EXPECT_LT(losses.back(), 0.8 * losses.front()) << out;
  std::smatch epoch;
  ASSERT_TRUE(std::regex_search(
      out, epoch,
      std::regex("epoch 1: [0-9.]+ s, [0-9]+ samples/s in all, test accuracy ([0-9.]+)%")))
      << out;
  EXPECT_GT(std::atof(epoch[1].str().c_str()), 40.0) << out;  // chance: 10%
}

}  // namespace
}  // namespace tessera::testing
