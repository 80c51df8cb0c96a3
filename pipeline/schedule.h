// Pipeline schedules: the order in which a training step's micro-batches go
// forward and backward through the stages.
//
// Note [Pipeline schedules]
// PipelineDriver::Train splits a batch into M micro-batches and runs them
// through S stages with an explicit backward per micro-batch: a stage keeps
// each micro-batch's graph (ActivationStash) from its forward until the
// gradient of its output arrives, then runs that micro-batch's backward,
// frees the graph, adds the parameters' gradients to the driver's
// distributed autograd context (so DistributedOptimizer::Step works as with
// PipelineDriver::Forward + Backward) and hands the input's gradient to the
// stage before it. Forward and backward chains go stage to stage by RRef;
// only the last stage's output and stage 0's completion reach the driver.
//
// - kGPipe: all M forwards, then all M backwards (after the last output
//   arrived). Every stage holds M micro-batches' activations at the peak.
// - kOneFOneB (PipeDream-Flush's "one forward, one backward"): a
//   micro-batch's backward starts as soon as its output reaches the driver,
//   and at most S micro-batches are in flight (forward started, backward not
//   finished at stage 0): a new micro-batch starts only when one in flight
//   has finished its backward — not necessarily the oldest: backwards may
//   finish out of order (traces show it). A stage so holds at most S micro-batches' activations whatever M
//   is — M can grow to shrink the pipeline's bubble without growing memory.
//   Stage k alternates forwards of new micro-batches with backwards of old
//   ones once the pipeline is full.
// Both compute the same gradients (a sum over micro-batches of each one's
// loss gradient, weighted by its share of the batch), equal to the
// one-process model's up to floating-point summation order.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pipeline/stage.h"
#include "rref/rref_context.h"

namespace tessera::pipeline {

enum class Schedule { kGPipe, kOneFOneB };

std::string ScheduleName(Schedule schedule);

// The loss of one micro-batch's output against its targets, a scalar mean
// over the micro-batch (e.g. cross-entropy): the step's loss is the mean over
// the batch, each micro-batch weighted by its rows.
using MicroBatchLoss =
    std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

struct StepResult {
  at::Tensor output;  // the model's output for the batch (detached)
  double loss = 0;    // the batch's loss (mean over micro-batches by rows)
};

// One training step of `stages` under `schedule` (PipelineDriver::Train).
// Runs on the calling thread, which holds the distributed autograd context;
// it launches every call, so they all carry the context.
StepResult RunScheduledStep(rref::RRefContext& rrefs, const std::vector<rref::RRef<Stage>>& stages,
                            Schedule schedule, int64_t micro_batches, absl::Duration timeout,
                            const at::Tensor& batch, const at::Tensor& target,
                            const MicroBatchLoss& loss);

}  // namespace tessera::pipeline
