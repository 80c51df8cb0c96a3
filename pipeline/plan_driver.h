// PlanDriver: trains a model cut into stages under a SchedulePlan (see Note
// [Schedules as data], schedule_plan.h), each worker running its own list
// of actions (PlanWorker, plan_worker.h).
//
//   pipeline::RegisterPlanWorker(classes, {{"front", MakeFront}, ...}, {{"mse", Mse}});
//   ... on the driver:
//   auto plan = pipeline::MakePlan("zb-h1", 4, 1, 8);
//   pipeline::PlanDriver driver(worker->rrefs(), *plan, {"w1", "w2", "w3", "w4"},
//                               {{"front", 1}, {"hidden", 2}, {"hidden", 3}, {"back", 4}}, "mse");
//   for (...) {
//     dist_autograd::ContextGuard context(worker->autograd());
//     double loss = driver.Train(images, labels);
//     optimizer.Step(context.id());
//   }
//
// The driver only feeds stage 0's micro-batches and the last stage's
// targets and collects the losses: activations and gradients go from
// worker to worker. The plan is checked (CheckPlan) before anything runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "pipeline/plan_worker.h"
#include "pipeline/schedule_plan.h"
#include "rref/rref_context.h"

namespace tessera::pipeline {

// A stage's model: the factory's name on its worker and the seed.
using StageSpec = std::pair<std::string, int64_t>;

class PlanDriver {
 public:
  // `workers`: the plan's workers by name, in its order; `stages`: each
  // stage's model; `loss`: the name of the loss the last stage computes
  // (a mean over its micro-batch; each weighted by its share of the batch).
  // Throws StatusError when the plan does not check or a worker cannot
  // make its part.
  PlanDriver(rref::RRefContext& rrefs, SchedulePlan plan, std::vector<std::string> workers,
             std::vector<StageSpec> stages, const std::string& loss,
             absl::Duration timeout = absl::ZeroDuration());

  // One step on `batch` (split along dimension 0 into the plan's
  // micro-batches; at least that many rows) inside the caller's distributed
  // autograd context: the stages' gradients end up there. Returns the
  // batch's loss. Throws StatusError naming the worker and the action.
  double Train(const at::Tensor& batch, const at::Tensor& target);

  // The gradients of stage `stage`'s parameters in a context.
  std::vector<at::Tensor> Gradients(int64_t context_id, int stage) const;
  // Every stage's parameters, as RRefs (for a DistributedOptimizer).
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs() const;
  const SchedulePlan& plan() const { return plan_; }

 private:
  rref::RRefContext& rrefs_;
  const SchedulePlan plan_;
  const absl::Duration timeout_;
  std::vector<rref::RRef<PlanWorker>> workers_;
  int64_t next_step_ = 0;
};

}  // namespace tessera::pipeline
