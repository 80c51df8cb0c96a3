// The pipeline transformer example: a Vision Transformer on Fashion-MNIST
// cut into 2 and 4 workers' stages, trained under every schedule, must
// follow the loss curve of the same model trained in one process, step by
// step, and reach its test accuracy — the schedules differ in the order
// of the work, not in what is computed. And under every schedule, a stage
// killed mid-training restarts the group from the driver's checkpoint,
// which goes on along that same curve.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

constexpr char kExample[] = "examples/pipeline_transformer/pipeline_transformer";
constexpr int kSteps = 20;

std::vector<std::string> TrainingArgs(int steps = kSteps) {
  return {"--epochs",    "1", "--max_steps",   std::to_string(steps),
          "--log_every", "1", "--test_images", "500"};
}

// The loss of each step, in order, from `offset` on.
std::vector<double> Losses(const std::string& out, size_t offset = 0) {
  std::vector<double> losses;
  const std::regex line("step [0-9]+/[0-9]+: loss ([0-9.]+)");
  for (auto it =
           std::sregex_iterator(out.begin() + static_cast<std::ptrdiff_t>(offset), out.end(), line);
       it != std::sregex_iterator(); ++it) {
    losses.push_back(std::stod((*it)[1].str()));
  }
  return losses;
}

double Accuracy(const std::string& out) { return FirstNumber(out, "test accuracy ([0-9.]+)%"); }

// The losses of `steps` steps of the model trained in one process; its
// output in `out`.
std::vector<double> LocalLosses(int steps, std::string* out) {
  std::vector<std::string> args = {kExample, "--schedule", "local"};
  for (const auto& arg : TrainingArgs(steps)) args.push_back(arg);
  ObservedProcess local(args);
  EXPECT_EQ(local.Finish(absl::Seconds(120)), 0) << local.output();
  *out = local.output();
  return Losses(local.output());
}

TEST(PipelineTransformerExampleTest, EveryScheduleFollowsTheLossCurveOfOneProcess) {
  std::string local;
  const std::vector<double> want = LocalLosses(kSteps, &local);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps)) << local;
  EXPECT_LT(want.back(), want.front() - 0.3) << "the model does not learn\n" << local;

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
    EXPECT_NEAR(Accuracy(job.output()), Accuracy(local), 0.5) << job.output();
    std::printf("%s: losses %.4f -> %.4f as in one process, test accuracy %.2f%%\n", what.c_str(),
                got.front(), got.back(), Accuracy(job.output()));
  }
}

// Checkpoints every 10 steps; a stage worker (the first, then the second,
// by turns) SIGKILLed after the one at step 20; tessera-run restarts the
// group, which resumes from the checkpoint. The parameters, Adam's state,
// the data order and the position are restored, so the resumed run's
// losses are the undisturbed curve's, step by step, to the end.
TEST(PipelineTransformerExampleTest, AKilledStageRestartsTheGroupUnderEverySchedule) {
  constexpr int kResumeSteps = 40;
  std::string local;
  const std::vector<double> want = LocalLosses(kResumeSteps, &local);
  ASSERT_EQ(want.size(), static_cast<size_t>(kResumeSteps)) << local;
  int victim = 1;
  for (const auto& [schedule, chunks] : std::vector<std::pair<std::string, int>>{
           {"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"zb-h1", 1}, {"zbv", 2}}) {
    SCOPED_TRACE(schedule);
    const std::string job_name = absl::StrCat("vit-resume-", getpid(), "-", schedule);
    setenv("TESSERA_TEST_JOB", job_name.c_str(), 1);
    const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", job_name);
    std::vector<std::string> args = {"--standalone",
                                     "--max_restarts",
                                     "1",
                                     "--nproc_per_node",
                                     "3",
                                     kExample,
                                     "--schedule",
                                     schedule,
                                     "--stages",
                                     "2",
                                     "--chunks",
                                     std::to_string(chunks),
                                     "--checkpoint_dir",
                                     dir,
                                     "--checkpoint_every",
                                     "10"};
    for (const auto& arg : TrainingArgs(kResumeSteps)) args.push_back(arg);
    Launcher job(args);
    ASSERT_TRUE(job.WaitFor("[driver] checkpoint at epoch 1 step 20", 1, absl::Seconds(120)))
        << job.output();
    const pid_t pid = WorkerPid(job_name, victim);
    ASSERT_GT(pid, 0) << "no single live process of rank " << victim << "\n" << job.output();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_EQ(job.Finish(absl::Seconds(180)), 0) << job.output();
    const std::string& out = job.output();
    EXPECT_EQ(job.Count("restarting the group (1/1)"), 1) << out;
    std::smatch resumed;
    ASSERT_TRUE(
        std::regex_search(out, resumed, std::regex("resuming from [^ ]+ at epoch 1 step (\\d+)")))
        << out;
    const int from = std::stoi(resumed[1].str());
    EXPECT_GE(from, 20) << out;
    EXPECT_EQ(from % 10, 0) << out;
    const std::vector<double> after =
        Losses(out, static_cast<size_t>(resumed.position(0) + resumed.length(0)));
    ASSERT_EQ(after.size(), static_cast<size_t>(kResumeSteps - from)) << out;
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_NEAR(after[i], want[from + i], 2e-4) << "step " << from + i + 1 << "\n" << out;
    }
    EXPECT_NEAR(Accuracy(out), Accuracy(local), 0.5) << out;
    std::printf(
        "%s: stage worker %d killed, resumed at step %d on the one-process curve "
        "(step %d loss %.4f)\n",
        schedule.c_str(), victim, from, kResumeSteps, after.back());
    victim = 3 - victim;
  }
}

}  // namespace
}  // namespace tessera::testing
