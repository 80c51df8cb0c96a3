#include "pipeline/schedule_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::pipeline {

std::string SchedulePlan::Print() const {
  std::string out = absl::StrCat(name, ": ", workers(), " workers, ", stages(), " stages, ",
                                 micro_batches, " micro-batches\n");
  for (int w = 0; w < workers(); ++w) {
    absl::StrAppend(
        &out, "worker ", w, ": ",
        absl::StrJoin(actions[w], " ",
                      [](std::string* to, const Action& a) { absl::StrAppend(to, ToString(a)); }),
        "\n");
  }
  return out;
}

std::vector<int> LoopedPlacement(int workers, int stages_per_worker) {
  std::vector<int> placement;
  for (int s = 0; s < workers * stages_per_worker; ++s) placement.push_back(s % workers);
  return placement;
}

std::vector<int> VPlacement(int workers) {
  std::vector<int> placement(2 * workers);
  for (int r = 0; r < workers; ++r) {
    placement[r] = r;
    placement[2 * workers - 1 - r] = r;
  }
  return placement;
}

SchedulePlan WithTransfers(std::string name, int micro_batches, std::vector<int> worker_of_stage,
                           const std::vector<std::vector<Action>>& compute) {
  SchedulePlan plan;
  plan.name = std::move(name);
  plan.micro_batches = micro_batches;
  plan.worker_of_stage = std::move(worker_of_stage);
  plan.actions.resize(compute.size());
  const int last = plan.stages() - 1;
  auto remote = [&](int w, int stage) {
    return stage >= 0 && stage <= last && plan.worker_of_stage[stage] != w;
  };
  for (size_t w = 0; w < compute.size(); ++w) {
    std::vector<Action>& out = plan.actions[w];
    for (const Action& a : compute[w]) {
      // F's input comes from the stage before, B's (and BW's) from the
      // stage after.
      const bool forward = a.kind == ActionKind::kForward;
      const int source = forward ? a.stage - 1 : a.stage + 1;
      const int sink = forward ? a.stage + 1 : a.stage - 1;
      const bool transfers = a.kind != ActionKind::kWeightBackward;
      if (transfers && remote(static_cast<int>(w), source)) {
        out.push_back({ActionKind::kReceive, a.stage, a.micro_batch, source});
      }
      out.push_back(a);
      if (transfers && remote(static_cast<int>(w), sink)) {
        out.push_back({ActionKind::kSend, a.stage, a.micro_batch, sink});
      }
    }
  }
  return plan;
}

}  // namespace tessera::pipeline
