#include "pipeline/plan_driver.h"

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/status.h"
#include "pipeline/plan_simulator.h"
#include "rref/remote.h"

namespace tessera::pipeline {

PlanDriver::PlanDriver(rref::RRefContext& rrefs, SchedulePlan plan,
                       std::vector<std::string> workers, std::vector<StageSpec> stages,
                       const std::string& loss, absl::Duration timeout)
    : rrefs_(rrefs), plan_(std::move(plan)), timeout_(timeout) {
  ThrowIfError(CheckPlan(plan_));
  if (static_cast<int>(workers.size()) != plan_.workers() ||
      static_cast<int>(stages.size()) != plan_.stages()) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "schedule ", plan_.name, " runs ", plan_.stages(), " stages on ", plan_.workers(),
        " workers; given ", stages.size(), " stages and ", workers.size(), " workers")));
  }
  for (int w = 0; w < plan_.workers(); ++w) {
    std::vector<int64_t> held, seeds;
    std::vector<std::string> models;
    for (int s = 0; s < plan_.stages(); ++s) {
      if (plan_.worker_of_stage[s] != w) continue;
      held.push_back(s);
      models.push_back(stages[s].first);
      seeds.push_back(stages[s].second);
    }
    workers_.push_back(
        rref::RemoteObject<PlanWorker>(rrefs_, workers[w], held, models, seeds, loss));
  }
  const std::vector<int64_t> placement(plan_.worker_of_stage.begin(), plan_.worker_of_stage.end());
  for (int w = 0; w < plan_.workers(); ++w) {
    workers_[w].RpcSync<bool>(timeout_, "connect", workers_, int64_t{w}, placement);
  }
}

double PlanDriver::Train(const at::Tensor& batch, const at::Tensor& target) {
  const int64_t m = plan_.micro_batches;
  if (batch.size(0) < m || target.size(0) != batch.size(0)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat("a batch of ", batch.size(0),
                                                              " rows (targets: ", target.size(0),
                                                              ") in ", m, " micro-batches")));
  }
  std::vector<at::Tensor> inputs = batch.chunk(m), targets = target.chunk(m);
  if (static_cast<int64_t>(inputs.size()) != m) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        batch.size(0), " rows do not split into ", m, " micro-batches (", inputs.size(), ")")));
  }
  std::vector<double> weights;
  for (const at::Tensor& part : inputs) {
    weights.push_back(static_cast<double>(part.size(0)) / static_cast<double>(batch.size(0)));
  }
  const int64_t step = next_step_++;
  const int first = plan_.worker_of_stage.front(), last = plan_.worker_of_stage.back();
  std::vector<Future<std::vector<double>>> runs;
  for (int w = 0; w < plan_.workers(); ++w) {
    runs.push_back(workers_[w].RpcAsync<std::vector<double>>(
        timeout_, "run_step", step, EncodeActions(plan_.actions[w]),
        w == first ? inputs : std::vector<at::Tensor>{},
        w == last ? targets : std::vector<at::Tensor>{},
        w == last ? weights : std::vector<double>{}));
  }
  const absl::Time deadline = absl::Now() + rrefs_.EffectiveTimeout(timeout_);
  double loss = 0;
  for (int w = 0; w < plan_.workers(); ++w) {
    auto losses = AwaitCall(runs[w], deadline);
    if (!losses.ok()) {
      throw StatusError(
          Annotate(losses.status(), absl::StrCat("schedule ", plan_.name, ", worker ", w)));
    }
    for (double part : *losses) loss += part;
  }
  return loss;
}

std::vector<at::Tensor> PlanDriver::Gradients(int64_t context_id, int stage) const {
  return workers_.at(plan_.worker_of_stage.at(stage))
      .RpcSync<std::vector<at::Tensor>>(timeout_, "gradients", context_id, int64_t{stage});
}

std::vector<rref::RRef<at::Tensor>> PlanDriver::ParameterRRefs() const {
  std::vector<rref::RRef<at::Tensor>> all;
  for (const auto& worker : workers_) {
    auto mine = worker.RpcSync<std::vector<rref::RRef<at::Tensor>>>(timeout_, "parameter_rrefs");
    all.insert(all.end(), mine.begin(), mine.end());
  }
  return all;
}

}  // namespace tessera::pipeline
