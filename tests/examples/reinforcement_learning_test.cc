// The reinforcement-learning example under tessera-run: an agent and two
// observers, each observer running CartPole and asking the agent for every
// action over RPC. For the fixed seed the policy must improve: the mean
// episode length of the last rounds well above the first rounds'. A seed
// gives one run (each observer samples from its own generator; the update
// recomputes the round in observer order), measured 15.8 -> 183.9.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(ReinforcementLearningExampleTest, PolicyImproves) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone",
                     "examples/reinforcement_learning/reinforcement_learning", "--rounds", "120",
                     "--seed", "1"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(300)), 0) << launcher.output();
  const std::string& out = launcher.output();
  std::smatch lengths;
  ASSERT_TRUE(std::regex_search(out, lengths,
                                std::regex("mean episode length ([0-9.]+) in the first 10 "
                                           "rounds, ([0-9.]+) in the last 10")))
      << out;
  const double first = std::atof(lengths[1].str().c_str());
  const double last = std::atof(lengths[2].str().c_str());
  EXPECT_GT(last, 1.5 * first) << out;
  EXPECT_GT(last, 80) << out;  // a random policy keeps the pole up ~20 steps
}

}  // namespace
}  // namespace tessera::testing
