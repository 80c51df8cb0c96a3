// PipelineDriver: runs batches through a chain of Stages (stage.h) on other
// workers, split into micro-batches so that the stages work concurrently.
//
// Training with a schedule (see Note [Pipeline schedules], schedule.h):
//   pipeline::PipelineOptions options;
//   options.micro_batches = 8;
//   options.schedule = pipeline::Schedule::kOneFOneB;
//   pipeline::PipelineDriver driver(worker->rrefs(), {front, back}, options);
//   auto optimizer =
//       DistributedOptimizer::Create(worker->rrefs(), driver.ParameterRRefs(), adam);
//   for (...) {
//     dist_autograd::ContextGuard context(worker->autograd());
//     pipeline::StepResult step = driver.Train(images, labels, cross_entropy);
//     optimizer.Step(context.id());
//   }
// or forward only, with the backward left to distributed autograd (GPipe):
//     at::Tensor loss = cross_entropy(driver.Forward(images), labels);
//     worker->autograd().Backward(context.id(), {loss});
//
// Forward puts every micro-batch on the wire at once: for micro-batch i it
// makes remote() calls forward on stage 1, 2, ... each taking the RRef of
// the previous stage's output, so stage k+1 fetches micro-batch i from
// stage k directly (not through the driver) as soon as it is computed,
// while stage k goes on with micro-batch i+1. Only the last stage's outputs
// come back; they are concatenated in order.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/time/time.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "rref/rref_context.h"

namespace tessera::pipeline {

struct PipelineOptions {
  int64_t micro_batches = 1;
  Schedule schedule = Schedule::kGPipe;  // of Train
  // Bounds each batch's forward (Forward) or step (Train); zero: the
  // runtime's default call timeout.
  absl::Duration timeout = absl::ZeroDuration();
};

class PipelineDriver {
 public:
  PipelineDriver(rref::RRefContext& rrefs, std::vector<rref::RRef<Stage>> stages,
                 PipelineOptions options = {});

  // The model's output for `batch` (split along dimension 0 into up to
  // micro_batches parts). Call inside a dist_autograd ContextGuard to train.
  // Throws StatusError naming the micro-batch and, in its cause, the stage's
  // worker when a stage fails or times out.
  at::Tensor Forward(const at::Tensor& batch);

  // One training step's forward and backward under the driver's schedule:
  // the stages' parameter gradients end up in the current distributed
  // autograd context (call inside a ContextGuard), as after Forward and
  // Backward. `target` is split like `batch`. Throws StatusError naming the
  // micro-batch, the direction and, in its cause, the stage's worker.
  StepResult Train(const at::Tensor& batch, const at::Tensor& target, const MicroBatchLoss& loss);

  // Every stage's parameters, in stage order.
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs() const;
  // Per stage, the most micro-batches whose activations Train kept alive at
  // once since the last call (which resets the count).
  std::vector<int64_t> PeakActivations() const;

  const std::vector<rref::RRef<Stage>>& stages() const { return stages_; }
  int64_t micro_batches() const { return options_.micro_batches; }
  Schedule schedule() const { return options_.schedule; }

 private:
  rref::RRefContext& rrefs_;
  const std::vector<rref::RRef<Stage>> stages_;
  const PipelineOptions options_;
};

}  // namespace tessera::pipeline
