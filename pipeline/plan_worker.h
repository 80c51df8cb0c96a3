// PlanWorker: one worker's part of a pipeline run from a plan (see Note
// [Schedules as data], schedule_plan.h) — its stages, and the runner of its
// list of actions, one at a time in the list's order. An object made with
// remote() on each worker of the pipeline (PlanDriver makes them).
//
// A step: the driver sends each worker its actions, stage 0's micro-batches
// to the worker that holds stage 0 and the targets to the one that holds
// the last stage, then waits for every worker to finish. Activations and
// gradients go worker to worker (Deliver), never through the driver; the
// last stage computes each micro-batch's loss, so its backward starts on
// the spot. B computes the gradient of the stage's input with the graph
// kept; W the parameters' gradients, freeing the graph; BW both in one
// pass. The parameters' gradients go into the driver's distributed
// autograd context, as PipelineDriver's stages put them, so
// DistributedOptimizer::Step works the same.
//
// Thread-safety: thread-safe. A step's actions run on the threads that
// complete its receives, one at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/future.h"
#include "common/mutex.h"
#include "pipeline/action.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "rpc/call_context.h"
#include "rref/class_registry.h"
#include "rref/rref.h"

namespace tessera::pipeline {

class PlanWorker : public std::enable_shared_from_this<PlanWorker> {
 public:
  PlanWorker(std::map<int64_t, StageModel> stages, MicroBatchLoss loss)
      : stages_(std::move(stages)), loss_(std::move(loss)) {}

  // The pipeline's workers, in the plan's order, which one this is, and
  // the worker of each stage (SchedulePlan::worker_of_stage).
  bool Connect(std::vector<rref::RRef<PlanWorker>> workers, int64_t self,
               std::vector<int64_t> worker_of_stage);
  // An activation (for `stage`'s forward) or a gradient (for its backward)
  // of micro-batch `micro` in step `step`, sent by another worker.
  bool Deliver(int64_t step, bool activation, int64_t stage, int64_t micro, at::Tensor value);
  // Runs this worker's actions of step `step` (EncodeActions) in order.
  // `inputs`: stage 0's micro-batches, if this worker holds it; `targets`
  // and `weights` (each micro-batch's share of the batch): the last
  // stage's, if it holds that. Completes with each micro-batch's weighted
  // loss at the last stage (empty elsewhere); fails naming the action.
  Future<std::vector<double>> RunStep(rpc::CallContext& ctx, int64_t step,
                                      std::vector<int64_t> actions, std::vector<at::Tensor> inputs,
                                      std::vector<at::Tensor> targets, std::vector<double> weights);

  // The gradients stage `stage`'s parameters hold in a distributed autograd
  // context, in parameter order (zeros where none).
  std::vector<at::Tensor> Gradients(rpc::CallContext& ctx, int64_t context_id, int64_t stage);
  // Every stage's parameters here as RRefs (for a DistributedOptimizer).
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs(rpc::CallContext& ctx);

 private:
  class StepRun;
  using InboxKey = std::tuple<int64_t, bool, int64_t, int64_t>;  // step, activation, stage, micro
  struct Letter {
    Promise<at::Tensor> promise;
    bool delivered = false;
    bool awaited = false;
  };
  // What another worker sends for `key`: ready once delivered.
  Future<at::Tensor> Incoming(const InboxKey& key);
  bool IsLastStage(int64_t stage) const;

  const std::map<int64_t, StageModel> stages_;
  const MicroBatchLoss loss_;
  mutable Mutex mu_;
  std::vector<rref::RRef<PlanWorker>> workers_ ABSL_GUARDED_BY(mu_);
  int64_t self_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int64_t> worker_of_stage_ ABSL_GUARDED_BY(mu_);
  std::map<InboxKey, Letter> inbox_ ABSL_GUARDED_BY(mu_);
};

// Actions as the integers RunStep takes: kind, stage, micro-batch, peer.
std::vector<int64_t> EncodeActions(const std::vector<Action>& actions);

// Registers PlanWorker as "tessera.pipeline.PlanWorker", constructed
// remotely from (its stages, the model factory name of each, their seeds,
// the loss's name). An unknown model or loss fails the remote() naming it.
void RegisterPlanWorker(rref::ClassRegistry& classes, std::map<std::string, StageFactory> factories,
                        std::map<std::string, MicroBatchLoss> losses);

}  // namespace tessera::pipeline
