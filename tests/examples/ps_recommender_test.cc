// The recommender on sharded parameter servers, run short as real processes
// under tessera-run.
//   - One trainer on two servers computes exactly the model one process
//     computes with the same tables and row optimizers (--servers 0): the
//     distribution changes where rows live, not the math.
//   - Two servers and two trainers learn in each consistency: the loss falls,
//     both trainers end with one model (the same test AUC and log loss to
//     four places), far above chance (AUC 0.5) and below the ground truth's.
// The full runs are in docs/guide/parameter-servers.md.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

constexpr char kProgram[] = "examples/ps_recommender/ps_recommender";
const std::regex kResult(
    "\\[(trainer\\d|one process)\\] (test AUC ([0-9.]+) \\(ground truth ([0-9.]+)\\), log loss "
    "[0-9.]+)");

struct Result {
  std::string who, line;
  double auc = 0, truth = 0;
};

std::vector<Result> Results(const std::string& out) {
  std::vector<Result> results;
  for (std::sregex_iterator it(out.begin(), out.end(), kResult), end; it != end; ++it) {
    results.push_back({(*it)[1], (*it)[2], std::stod((*it)[3]), std::stod((*it)[4])});
  }
  return results;
}

std::vector<std::string> Flags(std::vector<std::string> more) {
  std::vector<std::string> flags{"--samples", "100000",      "--test_samples",
                                 "20000",     "--log_every", "100"};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

TEST(PsRecommenderExampleTest, OneTrainerOnTwoServersComputesTheOneProcessModel) {
  std::vector<std::string> alone{kProgram, "--servers", "0"};
  for (const std::string& flag : Flags({})) alone.push_back(flag);
  ObservedProcess one(alone);
  ASSERT_EQ(one.Finish(absl::Seconds(300)), 0) << one.output();
  std::vector<std::string> args{"--nproc_per_node", "3", "--standalone",  kProgram,
                                "--servers",        "2", "--consistency", "async"};
  for (const std::string& flag : Flags({})) args.push_back(flag);
  Launcher job(args);
  ASSERT_EQ(job.Finish(absl::Seconds(300)), 0) << job.output();
  const std::vector<Result> expected = Results(one.output()), got = Results(job.output());
  ASSERT_EQ(expected.size(), 1u) << one.output();
  ASSERT_EQ(got.size(), 1u) << job.output();
  EXPECT_EQ(got[0].line, expected[0].line) << one.output() << job.output();
}

class ConsistencyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ConsistencyTest, TwoServersAndTwoTrainersLearnOneModel) {
  std::vector<std::string> args{"--nproc_per_node", "4", "--standalone",  kProgram,
                                "--servers",        "2", "--consistency", GetParam()};
  for (const std::string& flag : Flags({})) args.push_back(flag);
  Launcher job(args);
  ASSERT_EQ(job.Finish(absl::Seconds(300)), 0) << job.output();
  const std::string& out = job.output();
  EXPECT_EQ(job.Count("serving its shard of 13 tables to 2 trainers"), 2) << out;
  for (const char* trainer : {"trainer0", "trainer1"}) {
    const std::regex line(std::string("\\[") + trainer +
                          "\\] epoch 1 step \\d+/195: loss ([0-9.]+)");
    std::vector<double> losses;
    for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
      losses.push_back(std::stod((*it)[1]));
    }
    ASSERT_EQ(losses.size(), 2u) << out;
    EXPECT_LT(losses.back(), losses.front()) << out;
  }
  const std::vector<Result> results = Results(out);
  ASSERT_EQ(results.size(), 2u) << out;
  EXPECT_EQ(results[0].line, results[1].line) << "two models\n" << out;
  EXPECT_GT(results[0].auc, 0.7) << out;
  EXPECT_LT(results[0].auc, results[0].truth) << out;
}

INSTANTIATE_TEST_SUITE_P(EachConsistency, ConsistencyTest,
                         ::testing::Values("sync", "bounded", "async"));

}  // namespace
}  // namespace tessera::testing
