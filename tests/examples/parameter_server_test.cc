// The parameter-server example, run short as real processes under
// tessera-run: a server and two trainers. The loss must fall and the test
// accuracy must beat a bar far above chance (10%). The full run is in the
// README and docs/guide/job-shapes.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(ParameterServerExampleTest, ShortRunLearns) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone",
                     "examples/parameter_server/parameter_server", "--epochs", "1", "--max_steps",
                     "120", "--log_every", "20", "--test_images", "2000"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(600)), 0) << launcher.output();
  const std::string& out = launcher.output();
  // The server hands out the batches (batch_plan.h): the step lines come
  // from whichever trainer trained that step; both must have trained.
  const std::regex line("\\[trainer[12]\\] epoch 1 step \\d+/120: loss ([0-9.]+)");
  std::vector<double> losses;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    losses.push_back(std::atof((*it)[1].str().c_str()));
  }
  ASSERT_EQ(losses.size(), 6u) << out;
  EXPECT_LT(losses.back(), 0.8 * losses.front()) << out;
  std::smatch trained;
  ASSERT_TRUE(std::regex_search(
      out, trained, std::regex("steps trained: 120 of 120 \\(trainer1 (\\d+), trainer2 (\\d+)\\)")))
      << out;
  EXPECT_GT(std::atoi(trained[1].str().c_str()), 0) << out;
  EXPECT_GT(std::atoi(trained[2].str().c_str()), 0) << out;
  // On the images --test_images asked for: the server once scored all
  // 10,000 whatever the flag.
  std::smatch accuracy;
  ASSERT_TRUE(
      std::regex_search(out, accuracy, std::regex("test accuracy ([0-9.]+)% \\(2000 images\\)")))
      << out;
  EXPECT_GT(std::atof(accuracy[1].str().c_str()), 65.0) << out;
}

}  // namespace
}  // namespace tessera::testing
