// Pipeline-parallel training of a CNN on Fashion-MNIST over RPC: rank 0 is
// the driver, ranks 1 and 2 host the two stages (convolutions; linear
// layers), each a pipeline::Stage created with remote(). Every batch is
// split into micro-batches that flow through the stages concurrently
// (stage 2 works on micro-batch i while stage 1 computes i+1); backward runs
// with distributed autograd across both stages and a DistributedOptimizer
// steps them.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/pipeline/pipeline --micro_batches 4
// With --checkpoint_dir (and tessera-run --max_restarts 1) the driver saves
// the stages' parameters and the position, and a restarted group resumes.
// (one command line; a backslash would end a // comment's line in C++).
// `pipeline --help` lists the flags.
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/cnn.h"
#include "examples/common/dist_training.h"
#include "examples/common/remote_parameters.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"
#include "pipeline/pipeline_driver.h"
#include "pipeline/stage.h"
#include "tessera/worker.h"

ABSL_FLAG(int64_t, micro_batches, 4, "micro-batches each batch is split into");
ABSL_FLAG(std::string, schedule, "forward",
          "forward (PipelineDriver::Forward, backward by distributed autograd), gpipe or 1f1b "
          "(PipelineDriver::Train: a backward per micro-batch on each stage)");

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

// The CNN of examples/common in two stages; both draw the whole model from
// the seed and keep their part, so the split model starts as the whole would.
std::map<std::string, pipeline::StageFactory> CnnStages() {
  auto part = [](bool front) {
    return [front](int64_t seed) {
      std::vector<at::Tensor> all = InitCnn(static_cast<uint64_t>(seed));
      std::vector<at::Tensor> mine =
          front ? std::vector<at::Tensor>(all.begin(), all.begin() + kCnnFeatureParams)
                : std::vector<at::Tensor>(all.begin() + kCnnFeatureParams, all.end());
      pipeline::StageModel model;
      model.parameters = mine;
      model.forward = [front, mine](const at::Tensor& x) {
        return front ? CnnFeatures(mine, x) : CnnClassifier(mine, x);
      };
      return model;
    };
  };
  return {{"cnn_features", part(true)}, {"cnn_classifier", part(false)}};
}

// This process's peak resident memory (VmHWM), in MiB.
double PeakRssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024;
  }
  return 0;
}

double TestAccuracy(pipeline::PipelineDriver& driver, const data::Examples& test) {
  int64_t correct = 0;
  const int64_t n = test.labels.size(0);
  for (int64_t start = 0; start < n; start += 1000) {
    const int64_t size = std::min<int64_t>(1000, n - start);
    at::Tensor logits = driver.Forward(test.images.narrow(0, start, size));
    correct += at::argmax(logits, 1).eq(test.labels.narrow(0, start, size)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / n;
}

// Rank 0: drives training through the stages.
int RunDriver(Worker& worker, const TrainingFlags& flags) {
  const auto start = Clock::now();
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
  const auto seed = static_cast<int64_t>(flags.seed);
  auto features = worker.RemoteObject<pipeline::Stage>("stage1", std::string("cnn_features"), seed);
  auto classifier =
      worker.RemoteObject<pipeline::Stage>("stage2", std::string("cnn_classifier"), seed);
  const int64_t micro_batches = absl::GetFlag(FLAGS_micro_batches);
  const std::string schedule = absl::GetFlag(FLAGS_schedule);
  pipeline::PipelineOptions pipeline_options;
  pipeline_options.micro_batches = micro_batches;
  pipeline_options.schedule =
      schedule == "1f1b" ? pipeline::Schedule::kOneFOneB : pipeline::Schedule::kGPipe;
  pipeline::PipelineDriver driver(worker.rrefs(), {features, classifier}, pipeline_options);
  dist_optim::AdamOptions adam;
  adam.lr = flags.lr;
  const std::vector<rref::RRef<at::Tensor>> params = driver.ParameterRRefs();
  auto optimizer = dist_optim::DistributedOptimizer::Create(worker.rrefs(), params, adam);
  // The driver saves the stages' parameters, their optimizers' state and
  // the position; on a restart it loads them back into the new stages.
  Resume resume(flags, "pipeline", /*writer=*/true);
  const EpochHooks hooks = ResumeRemoteModel(worker, resume, params, optimizer, "driver");
  std::printf(
      "[driver] CNN in 2 stages (stage1: convolutions, stage2: linear layers), "
      "batch %lld in %lld micro-batches, schedule %s\n",
      static_cast<long long>(flags.batch), static_cast<long long>(micro_batches), schedule.c_str());
  std::fflush(stdout);

  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {1, 0, /*shuffle=*/true, /*seed=*/1, /*drop_last=*/false});
  const double throughput = TrainEpochs(
      flags, train, sampler, "driver",
      [&](const at::Tensor& images, const at::Tensor& labels) {
        if (schedule == "forward") {
          return DistAutogradStep(worker.autograd(), optimizer, labels,
                                  [&] { return driver.Forward(images); });
        }
        dist_autograd::ContextGuard context(worker.autograd());
        const double loss = driver
                                .Train(images, labels,
                                       [](const at::Tensor& logits, const at::Tensor& y) {
                                         return at::cross_entropy_loss(logits, y);
                                       })
                                .loss;
        optimizer.Step(context.id());
        return loss;
      },
      hooks);
  if (schedule != "forward") {
    const std::vector<int64_t> peaks = driver.PeakActivations();
    std::printf(
        "[driver] %s: at most %lld and %lld micro-batches' activations alive at once on "
        "stage1 and stage2; stages' peak memory %.1f and %.1f MiB\n",
        schedule.c_str(), static_cast<long long>(peaks[0]), static_cast<long long>(peaks[1]),
        worker.RpcSync<double>("stage1", "peak_rss_mib"),
        worker.RpcSync<double>("stage2", "peak_rss_mib"));
  }
  std::printf(
      "[driver] test accuracy %.2f%% (%lld images), training %.0f samples/s with %lld "
      "micro-batches, %.1f s in all\n",
      100 * TestAccuracy(driver, test), static_cast<long long>(test.labels.size(0)), throughput,
      static_cast<long long>(micro_batches), SecondsSince(start));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  return examples::RunExample(
      argc, argv,
      "Pipeline-parallel training of a CNN on Fashion-MNIST over RPC; run it with "
      "tessera-run --nproc_per_node 3 (a driver and two stages).",
      [](const examples::TrainingFlags& flags) {
        examples::Require(absl::GetFlag(FLAGS_micro_batches) >= 1, "--micro_batches must be >= 1");
        WorkerOptions options = WorkerOptions::FromEnv();
        examples::Require(options.world_size == 3,
                          "runs as a driver and two stages: --nproc_per_node 3");
        options.name = options.rank == 0 ? "driver" : absl::StrCat("stage", options.rank);
        auto worker = Worker::Start(options);
        // Ranks 1 and 2 host the stages the driver creates on them; the
        // driver's Shutdown releases them once training is done.
        pipeline::RegisterStage(worker->rrefs().classes(), examples::CnnStages());
        worker->Register("peak_rss_mib", [] { return examples::PeakRssMib(); });
        examples::RegisterParameterLoading(*worker);
        const int status = options.rank == 0 ? examples::RunDriver(*worker, flags) : 0;
        worker->Shutdown();
        return status;
      });
}
