// The pipeline transformer example: a Vision Transformer on Fashion-MNIST
// cut into 2 and 4 workers' stages, trained under every schedule, must
// follow the loss curve of the same model trained in one process, step by
// step, and reach its test accuracy — the schedules differ in the order
// of the work, not in what is computed.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

constexpr char kExample[] = "examples/pipeline_transformer/pipeline_transformer";
constexpr int kSteps = 20;

std::vector<std::string> TrainingArgs() {
  return {"--epochs",    "1", "--max_steps",   std::to_string(kSteps),
          "--log_every", "1", "--test_images", "500"};
}

// The loss of each step, in order.
std::vector<double> Losses(const std::string& out) {
  std::vector<double> losses;
  const std::regex line("step [0-9]+/[0-9]+: loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    losses.push_back(std::stod((*it)[1].str()));
  }
  return losses;
}

double Accuracy(const std::string& out) { return FirstNumber(out, "test accuracy ([0-9.]+)%"); }

TEST(PipelineTransformerExampleTest, EveryScheduleFollowsTheLossCurveOfOneProcess) {
  std::vector<std::string> local_args = {kExample, "--schedule", "local"};
  for (const auto& arg : TrainingArgs()) local_args.push_back(arg);
  ObservedProcess local(local_args);
  ASSERT_EQ(local.Finish(absl::Seconds(120)), 0) << local.output();
  const std::vector<double> want = Losses(local.output());
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps)) << local.output();
  EXPECT_LT(want.back(), want.front() - 0.3) << "the model does not learn\n" << local.output();

  struct Run {
    std::string schedule;
    int stages;
    int chunks;
    int micro_batches;
  };
  for (const Run& run : std::vector<Run>{{"gpipe", 2, 1, 4},
                                         {"1f1b", 2, 1, 4},
                                         {"interleaved", 2, 2, 4},
                                         {"zb-h1", 2, 1, 4},
                                         {"zbv", 2, 2, 4},
                                         {"1f1b", 4, 1, 8},
                                         {"interleaved", 4, 2, 8},
                                         {"zb-h1", 4, 1, 8},
                                         {"zbv", 4, 2, 8}}) {
    const std::string what =
        absl::StrCat(run.schedule, " p=", run.stages, " v=", run.chunks, " m=", run.micro_batches);
    SCOPED_TRACE(what);
    std::vector<std::string> args = {"--standalone",
                                     "--nproc_per_node",
                                     std::to_string(run.stages + 1),
                                     kExample,
                                     "--schedule",
                                     run.schedule,
                                     "--stages",
                                     std::to_string(run.stages),
                                     "--chunks",
                                     std::to_string(run.chunks),
                                     "--micro_batches",
                                     std::to_string(run.micro_batches)};
    for (const auto& arg : TrainingArgs()) args.push_back(arg);
    Launcher job(args);
    ASSERT_EQ(job.Finish(absl::Seconds(180)), 0) << job.output();
    const std::vector<double> got = Losses(job.output());
    ASSERT_EQ(got.size(), want.size()) << job.output();
    // Printed to 4 places; the sums differ in order only, ~1e-6.
    for (size_t step = 0; step < want.size(); ++step) {
      EXPECT_NEAR(got[step], want[step], 2e-4) << "step " << step + 1 << "\n" << job.output();
    }
    EXPECT_NEAR(Accuracy(job.output()), Accuracy(local.output()), 0.5) << job.output();
    std::printf("%s: losses %.4f -> %.4f as in one process, test accuracy %.2f%%\n", what.c_str(),
                got.front(), got.back(), Accuracy(job.output()));
  }
}

}  // namespace
}  // namespace tessera::testing
