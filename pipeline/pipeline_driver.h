// PipelineDriver: runs batches through a chain of Stages (stage.h) on other
// workers, split into micro-batches so that the stages work concurrently.
//
//   pipeline::PipelineDriver driver(worker->rrefs(), {front, back}, /*micro_batches=*/4);
//   auto optimizer =
//       DistributedOptimizer::Create(worker->rrefs(), driver.ParameterRRefs(), adam);
//   for (...) {
//     dist_autograd::ContextGuard context(worker->autograd());
//     at::Tensor loss = cross_entropy(driver.Forward(images), labels);
//     worker->autograd().Backward(context.id(), {loss});
//     optimizer.Step(context.id());
//   }
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
#include "pipeline/stage.h"
#include "rref/rref_context.h"

namespace tessera::pipeline {

class PipelineDriver {
 public:
  // `timeout` bounds each batch's forward; zero: the runtime's default
  // call timeout.
  PipelineDriver(rref::RRefContext& rrefs, std::vector<rref::RRef<Stage>> stages,
                 int64_t micro_batches, absl::Duration timeout = absl::ZeroDuration());

  // The model's output for `batch` (split along dimension 0 into up to
  // micro_batches parts). Call inside a dist_autograd ContextGuard to train.
  // Throws StatusError naming the micro-batch and, in its cause, the stage's
  // worker when a stage fails or times out.
  at::Tensor Forward(const at::Tensor& batch);

  // Every stage's parameters, in stage order.
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs() const;

  const std::vector<rref::RRef<Stage>>& stages() const { return stages_; }
  int64_t micro_batches() const { return micro_batches_; }

 private:
  rref::RRefContext& rrefs_;
  const std::vector<rref::RRef<Stage>> stages_;
  const int64_t micro_batches_;
  const absl::Duration timeout_;
};

}  // namespace tessera::pipeline
