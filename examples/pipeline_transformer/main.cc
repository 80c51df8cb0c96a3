// Pipeline-parallel training of a small Vision Transformer on Fashion-MNIST
// (Debian's data set; vit.h) under any of the schedules of
// pipeline/schedules.h, each worker running its own list of actions
// (pipeline::PlanDriver): rank 0 is the driver, ranks 1..p the workers that
// hold the stages — one each (gpipe, 1f1b, zb-h1) or two (interleaved with
// --chunks 2, zbv). The model's blocks are cut into p x v stages; the
// driver feeds micro-batches and collects losses, a DistributedOptimizer
// (Adam) steps every stage. --schedule local trains the same model in one
// process, for comparison: the losses are the same, step by step, to
// floating-point summation order. With --checkpoint_dir (and tessera-run
// --max_restarts 1) the driver saves the stages' parameters, Adam's state
// and the position, and a group restarted after a stage died resumes there.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 5
//       bazel-bin/examples/pipeline_transformer/pipeline_transformer
//       --schedule zb-h1 --stages 4 --micro_batches 8
//   bazel-bin/examples/pipeline_transformer/pipeline_transformer --schedule local
// (one command line each; a backslash would end a // comment's line in C++).
// `pipeline_transformer --help` lists the flags.
#include <ATen/ops/cross_entropy_loss.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/remote_parameters.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"
#include "examples/pipeline_transformer/vit.h"
#include "pipeline/plan_driver.h"
#include "pipeline/plan_simulator.h"
#include "pipeline/plan_worker.h"
#include "pipeline/schedules.h"
#include "tessera/worker.h"

ABSL_FLAG(std::string, schedule, "1f1b",
          "gpipe, 1f1b, interleaved, zb-h1, zbv (pipeline/schedules.h), or local: the whole "
          "model in this one process");
ABSL_FLAG(int, stages, 2, "workers holding stages (p); the job has p + 1 processes");
ABSL_FLAG(int, chunks, 1,
          "stages a worker holds (v): 2 for interleaved's looped placement; zbv "
          "always holds 2");
ABSL_FLAG(int, micro_batches, 4, "micro-batches each batch is split into (m)");
ABSL_FLAG(int, blocks, 8, "transformer blocks, cut into p x v stages of whole blocks");

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

VitConfig Config() {
  VitConfig config;
  config.blocks = absl::GetFlag(FLAGS_blocks);
  return config;
}

at::Tensor CrossEntropy(const at::Tensor& logits, const at::Tensor& labels) {
  return at::cross_entropy_loss(logits, labels);
}

// The factory of stage `chunk` of `chunks`, under the name "vit<chunk>":
// each draws the whole model from the seed and keeps its part, so the cut
// model starts as the whole would.
std::map<std::string, pipeline::StageFactory> VitStages(int chunks) {
  std::map<std::string, pipeline::StageFactory> factories;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    factories[absl::StrCat("vit", chunk)] = [chunk, chunks](int64_t seed) {
      const VitConfig config = Config();
      pipeline::StageModel model;
      model.parameters =
          ChunkParameters(config, InitVit(config, static_cast<uint64_t>(seed)), chunk, chunks);
      model.forward = [config, chunk, chunks, params = model.parameters](const at::Tensor& x) {
        return VitChunk(config, params, chunk, chunks, x);
      };
      return model;
    };
  }
  return factories;
}

void PrintAccuracy(const std::string& who, const TrainingFlags& flags,
                   const std::vector<at::Tensor>& params, double throughput,
                   Clock::time_point start) {
  const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
  const VitConfig config = Config();
  const double accuracy = TestAccuracy(test, flags.test_images, [&](const at::Tensor& images) {
    return VitForward(config, params, images);
  });
  std::printf("[%s] test accuracy %.2f%% (%lld images), training %.0f samples/s, %.1f s in all\n",
              who.c_str(), 100 * accuracy,
              static_cast<long long>(TestImages(test, flags.test_images)), throughput,
              SecondsSince(start));
  std::fflush(stdout);
}

ddp::DistributedSampler Sampler(const data::Examples& train) {
  return ddp::DistributedSampler(static_cast<size_t>(train.labels.size(0)),
                                 {1, 0, /*shuffle=*/true, /*seed=*/1, /*drop_last=*/false});
}

// The same model, data order and optimizer in one process.
int RunLocally(const TrainingFlags& flags) {
  const auto start = Clock::now();
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  const VitConfig config = Config();
  std::vector<at::Tensor> params = InitVit(config, flags.seed);
  torch::optim::Adam optimizer(params, torch::optim::AdamOptions(flags.lr));
  std::printf("[local] ViT of %lld blocks in one process\n", static_cast<long long>(config.blocks));
  std::fflush(stdout);
  ddp::DistributedSampler sampler = Sampler(train);
  const double throughput = TrainEpochs(
      flags, train, sampler, "local", [&](const at::Tensor& images, const at::Tensor& labels) {
        optimizer.zero_grad();
        at::Tensor loss = CrossEntropy(VitForward(config, params, images), labels);
        torch::autograd::backward({loss});
        optimizer.step();
        return loss.item<double>();
      });
  PrintAccuracy("local", flags, params, throughput, start);
  return 0;
}

// Every stage's parameters fetched, in the model's order: ParameterRRefs
// lists them by worker, each worker's stages in stage order.
std::vector<at::Tensor> ModelParameters(const pipeline::PlanDriver& driver,
                                        const std::vector<rref::RRef<at::Tensor>>& rrefs) {
  const pipeline::SchedulePlan& plan = driver.plan();
  const VitConfig config = Config();
  std::map<std::string, at::Tensor> fetched = FetchParameters(rrefs, "");
  std::vector<std::vector<at::Tensor>> by_stage(plan.stages());
  size_t next = 0;
  for (int worker = 0; worker < plan.workers(); ++worker) {
    for (int stage = 0; stage < plan.stages(); ++stage) {
      if (plan.worker_of_stage[stage] != worker) continue;
      const size_t count = ChunkParameterCount(config, stage, plan.stages());
      for (size_t i = 0; i < count; ++i)
        by_stage[stage].push_back(fetched.at(std::to_string(next++)));
    }
  }
  std::vector<at::Tensor> params;
  for (const auto& stage : by_stage) params.insert(params.end(), stage.begin(), stage.end());
  return params;
}

// What the plan promises on paper, for the measured bubble beside it
// (bench/pipeline_schedules.sh). PlanDriver has checked the plan: it runs.
void PrintPlanOnPaper(const pipeline::SchedulePlan& plan) {
  const pipeline::PlanRun paper = *pipeline::SimulatePlan(plan);
  double idle = 0;
  int held = 0;
  for (int w = 0; w < plan.workers(); ++w) {
    idle += paper.idle_fraction(w) / plan.workers();
    held = std::max(held, paper.peak_activations[w]);
  }
  std::printf(
      "[driver] on paper (F, B and W alike): idle share %.3f, at most %d micro-batches' "
      "activations held on a worker\n",
      idle, held);
  std::fflush(stdout);
}

int RunDriver(Worker& worker, const TrainingFlags& flags, const pipeline::SchedulePlan& plan) {
  const auto start = Clock::now();
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  std::vector<std::string> workers;
  for (int w = 1; w <= plan.workers(); ++w) workers.push_back(absl::StrCat("stage", w));
  std::vector<pipeline::StageSpec> stages;
  for (int s = 0; s < plan.stages(); ++s) {
    stages.emplace_back(absl::StrCat("vit", s), static_cast<int64_t>(flags.seed));
  }
  pipeline::PlanDriver driver(worker.rrefs(), plan, workers, stages, "cross_entropy");
  dist_optim::AdamOptions adam;
  adam.lr = flags.lr;
  const std::vector<rref::RRef<at::Tensor>> params = driver.ParameterRRefs();
  auto optimizer = dist_optim::DistributedOptimizer::Create(worker.rrefs(), params, adam);
  std::printf(
      "[driver] ViT of %d blocks in %d stages on %d workers, schedule %s, batch %lld in "
      "%d micro-batches\n",
      absl::GetFlag(FLAGS_blocks), plan.stages(), plan.workers(), plan.name.c_str(),
      static_cast<long long>(flags.batch), absl::GetFlag(FLAGS_micro_batches));
  PrintPlanOnPaper(plan);
  // The driver saves the stages' parameters, their optimizers' state and
  // the position; on a restart it loads them back into the new stages.
  Resume resume(flags, "pipeline_transformer", /*writer=*/true);
  const EpochHooks hooks = ResumeRemoteModel(worker, resume, params, optimizer, "driver");
  ddp::DistributedSampler sampler = Sampler(train);
  const double throughput = TrainEpochs(
      flags, train, sampler, "driver",
      [&](const at::Tensor& images, const at::Tensor& labels) {
        dist_autograd::ContextGuard context(worker.autograd());
        const double loss = driver.Train(images, labels);
        optimizer.Step(context.id());
        return loss;
      },
      hooks);
  PrintAccuracy("driver", flags, ModelParameters(driver, params), throughput, start);
  return 0;
}

int RunPipelined(const TrainingFlags& flags, const std::string& schedule) {
  const int p = absl::GetFlag(FLAGS_stages);
  const int chunks = schedule == "zbv" ? 2 : absl::GetFlag(FLAGS_chunks);
  auto plan = pipeline::MakePlan(schedule, p, chunks, absl::GetFlag(FLAGS_micro_batches));
  if (!plan.ok()) throw StatusError(plan.status());
  WorkerOptions options = WorkerOptions::FromEnv();
  Require(options.world_size == p + 1,
          absl::StrCat("runs as a driver and ", p, " stage workers (--stages ", p,
                       "): tessera-run --nproc_per_node ", p + 1));
  options.name = options.rank == 0 ? "driver" : absl::StrCat("stage", options.rank);
  auto worker = Worker::Start(options);
  // The stage workers hold the PlanWorkers the driver creates on them; the
  // driver's Shutdown releases them once training is done.
  pipeline::RegisterPlanWorker(worker->rrefs().classes(), VitStages(plan->stages()),
                               {{"cross_entropy", CrossEntropy}});
  RegisterParameterLoading(*worker);
  const int status = options.rank == 0 ? RunDriver(*worker, flags, *plan) : 0;
  worker->Shutdown();
  return status;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  return examples::RunExample(
      argc, argv,
      "Pipeline-parallel training of a Vision Transformer on Fashion-MNIST under a schedule of "
      "actions; run it with tessera-run --nproc_per_node <stages + 1>, or alone with "
      "--schedule local.",
      [](const examples::TrainingFlags& flags) {
        const std::string schedule = absl::GetFlag(FLAGS_schedule);
        examples::Require(absl::GetFlag(FLAGS_micro_batches) >= 1, "--micro_batches must be >= 1");
        examples::Require(absl::GetFlag(FLAGS_blocks) >= 1, "--blocks must be >= 1");
        if (schedule == "local") return examples::RunLocally(flags);
        return examples::RunPipelined(flags, schedule);
      });
}
