// The sharded batch-updating parameter server, run short as real processes
// under tessera-run: two servers and two trainers. Both trainers train every
// step, the loss falls, and both end with one model: the same test accuracy,
// far above chance (10%). The full run is in docs/guide/parameter-servers.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(PsBatchUpdatingExampleTest, TwoServersAndTwoTrainersLearnOneModel) {
  Launcher launcher({"--nproc_per_node", "4", "--standalone",
                     "examples/ps_batch_updating/ps_batch_updating", "--servers", "2", "--epochs",
                     "1", "--max_steps", "80", "--log_every", "20", "--test_images", "2000"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(600)), 0) << launcher.output();
  const std::string& out = launcher.output();
  EXPECT_EQ(launcher.Count("serving its shard of 8 tables to 2 trainers"), 2) << out;
  for (const char* trainer : {"trainer0", "trainer1"}) {
    const std::regex line(std::string("\\[") + trainer +
                          "\\] epoch 1 step \\d+/80: loss ([0-9.]+)");
    std::vector<double> losses;
    for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
      losses.push_back(std::atof((*it)[1].str().c_str()));
    }
    ASSERT_EQ(losses.size(), 4u) << out;
    EXPECT_LT(losses.back(), 0.8 * losses.front()) << out;
  }
  const std::regex accuracy("\\[trainer([01])\\] test accuracy ([0-9.]+)%");
  std::vector<std::string> accuracies;
  for (std::sregex_iterator it(out.begin(), out.end(), accuracy), end; it != end; ++it) {
    accuracies.push_back((*it)[2].str());
  }
  ASSERT_EQ(accuracies.size(), 2u) << out;
  EXPECT_EQ(accuracies[0], accuracies[1]) << "two models\n" << out;
  EXPECT_GT(std::atof(accuracies[0].c_str()), 65.0) << out;
}

}  // namespace
}  // namespace tessera::testing
