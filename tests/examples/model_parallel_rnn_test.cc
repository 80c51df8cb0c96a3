// The model-parallel RNN example under tessera-run: embedding and decoder on
// the parameter server, the LSTM on the trainer, trained through distributed
// autograd and a DistributedOptimizer. The loss must fall and the next
// token be learnt (chance is 1 in 32).
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(ModelParallelRnnExampleTest, LearnsTheNextToken) {
  Launcher launcher({"--nproc_per_node", "2", "--standalone",
                     "examples/model_parallel_rnn/model_parallel_rnn", "--steps", "80"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(300)), 0) << launcher.output();
  const std::string& out = launcher.output();
  std::smatch result;
  ASSERT_TRUE(std::regex_search(
      out, result,
      std::regex("loss ([0-9.]+) -> ([0-9.]+) in 80 steps, [0-9.]+ s; next-token accuracy "
                 "([0-9.]+)%")))
      << out;
  EXPECT_LT(std::atof(result[2].str().c_str()), 0.2 * std::atof(result[1].str().c_str())) << out;
  EXPECT_GT(std::atof(result[3].str().c_str()), 90.0) << out;
}

}  // namespace
}  // namespace tessera::testing
