#include "pipeline/plan_simulator.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::pipeline {
namespace {

// Where one micro-batch stands at one stage: when each of its computations
// ended (unset until run; a W that ran freed the activations).
struct Progress {
  std::optional<double> forward, input_backward, weight_backward;
};

// A transfer, by what it carries: (activation?, sending stage, receiving
// stage, micro-batch).
using TransferKey = std::tuple<bool, int, int, int>;

TransferKey KeyOf(const Action& a) {
  return a.kind == ActionKind::kSend
             ? TransferKey{a.carries_activation(), a.stage, a.peer, a.micro_batch}
             : TransferKey{a.carries_activation(), a.peer, a.stage, a.micro_batch};
}

class Simulation {
 public:
  Simulation(const SchedulePlan& plan, const ActionCosts& costs)
      : plan_(plan),
        costs_(costs),
        progress_(plan.stages(), std::vector<Progress>(plan.micro_batches)) {
    const int workers = plan.workers();
    next_.assign(workers, 0);
    clock_.assign(workers, 0);
    held_.assign(workers, 0);
    run_.busy.assign(workers, 0);
    run_.peak_activations.assign(workers, 0);
    for (int w = 0; w < workers; ++w) {
      run_.start.emplace_back(plan.actions[w].size(), 0);
      for (const Action& a : plan.actions[w]) {
        if (a.kind == ActionKind::kSend) planned_sends_[KeyOf(a)] = w;
      }
    }
  }

  absl::StatusOr<PlanRun> Run() {
    while (true) {
      bool moved = false, left = false;
      for (int w = 0; w < plan_.workers(); ++w) {
        while (next_[w] < plan_.actions[w].size()) {
          const Action& a = plan_.actions[w][next_[w]];
          if (auto error = Invalid(w, a); error.has_value()) return Fail(w, *error);
          if (a.kind == ActionKind::kReceive && !arrived_.count(KeyOf(a))) break;
          Execute(w, a);
          moved = true;
        }
        left |= next_[w] < plan_.actions[w].size();
      }
      if (!left) break;
      if (!moved) return Deadlock();
    }
    if (absl::Status complete = Complete(); !complete.ok()) return complete;
    for (double end : clock_) run_.makespan = std::max(run_.makespan, end);
    return std::move(run_);
  }

 private:
  absl::Status Fail(int w, const std::string& why) const {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule ", plan_.name, ": worker ", w, "'s action ", next_[w], " (",
                     ToString(plan_.actions[w][next_[w]]), ") ", why));
  }

  // Whether the stage's input for `a` is here: for F, the stage before's
  // activation; for B and BW, the stage after's gradient (the loss's, at
  // the last stage).
  std::optional<std::string> MissingInput(int w, const Action& a) const {
    const bool forward = a.kind == ActionKind::kForward;
    const int source = forward ? a.stage - 1 : a.stage + 1;
    if (source < 0 || source >= plan_.stages()) return std::nullopt;
    const Progress& from = progress_[source][a.micro_batch];
    if (plan_.worker_of_stage[source] == w) {
      if (forward ? from.forward.has_value() : from.input_backward.has_value()) return std::nullopt;
      return absl::StrCat(
          "comes before ",
          ToString(forward ? Forward(source, a.micro_batch) : InputBackward(source, a.micro_batch)),
          ", which makes its input on the same worker");
    }
    if (received_.count({forward, source, a.stage, a.micro_batch})) return std::nullopt;
    return absl::StrCat("needs the ", forward ? "activation" : "gradient", " of stage ", source,
                        ", and no receive of it comes before it");
  }

  std::optional<std::string> InvalidCompute(int w, const Action& a) const {
    const Progress& p = progress_[a.stage][a.micro_batch];
    switch (a.kind) {
      case ActionKind::kForward:
        if (p.forward) return "runs a second time";
        return MissingInput(w, a);
      case ActionKind::kInputBackward:
        if (p.input_backward) return "runs a second time";
        if (!p.forward)
          return absl::StrCat("uses activations before ", ToString(Forward(a.stage, a.micro_batch)),
                              " made them");
        return MissingInput(w, a);
      case ActionKind::kFullBackward:
        if (p.weight_backward) return "runs a second time, on activations freed";
        if (p.input_backward) return "runs a backward that already ran";
        if (!p.forward)
          return absl::StrCat("uses activations before ", ToString(Forward(a.stage, a.micro_batch)),
                              " made them");
        return MissingInput(w, a);
      default:  // kWeightBackward
        if (p.weight_backward) return "runs a second time, on activations freed";
        if (!p.input_backward) {
          return absl::StrCat("comes before ", ToString(InputBackward(a.stage, a.micro_batch)),
                              ", whose output gradient it needs");
        }
        return std::nullopt;
    }
  }

  std::optional<std::string> InvalidTransfer(const Action& a) const {
    const bool send = a.kind == ActionKind::kSend;
    if (a.peer != a.stage - 1 && a.peer != a.stage + 1) {
      return "names a peer stage that is not next to its own";
    }
    if (a.peer < 0 || a.peer >= plan_.stages()) return "names a stage the model does not have";
    if (plan_.worker_of_stage[a.peer] == plan_.worker_of_stage[a.stage]) {
      return absl::StrCat("names stage ", a.peer, ", on its own worker: nothing crosses to it");
    }
    if (send) {
      if (sent_.count(KeyOf(a))) return "sends a second time";
      const Progress& p = progress_[a.stage][a.micro_batch];
      if (a.carries_activation() ? !p.forward : !p.input_backward) {
        return absl::StrCat(
            "sends before ",
            ToString(a.carries_activation() ? Forward(a.stage, a.micro_batch)
                                            : InputBackward(a.stage, a.micro_batch)),
            " made it");
      }
      return std::nullopt;
    }
    if (received_.count(KeyOf(a))) return "receives a second time";
    if (!planned_sends_.count(KeyOf(a))) return "waits for a send no worker makes";
    return std::nullopt;
  }

  std::optional<std::string> Invalid(int w, const Action& a) const {
    if (a.stage < 0 || a.stage >= plan_.stages() || a.micro_batch < 0 ||
        a.micro_batch >= plan_.micro_batches) {
      return "names a stage or micro-batch the plan does not have";
    }
    if (plan_.worker_of_stage[a.stage] != w) {
      return absl::StrCat("is on a worker that does not hold stage ", a.stage, " (worker ",
                          plan_.worker_of_stage[a.stage], " does)");
    }
    if (a.is_compute()) return InvalidCompute(w, a);
    return InvalidTransfer(a);
  }

  void Execute(int w, const Action& a) {
    double& clock = clock_[w];
    Progress& p = progress_[a.stage][a.micro_batch];
    if (a.kind == ActionKind::kReceive) clock = std::max(clock, arrived_[KeyOf(a)]);
    run_.start[w][next_[w]] = clock;
    switch (a.kind) {
      case ActionKind::kForward:
        clock += costs_.forward;
        p.forward = clock;
        run_.peak_activations[w] = std::max(run_.peak_activations[w], ++held_[w]);
        break;
      case ActionKind::kInputBackward:
        clock += costs_.input_backward;
        p.input_backward = clock;
        break;
      case ActionKind::kWeightBackward:
        clock += costs_.weight_backward;
        p.weight_backward = clock;
        --held_[w];
        break;
      case ActionKind::kFullBackward:
        clock += costs_.input_backward + costs_.weight_backward;
        p.input_backward = p.weight_backward = clock;
        --held_[w];
        break;
      case ActionKind::kSend:
        sent_.insert(KeyOf(a));
        arrived_[KeyOf(a)] = clock + costs_.transfer;
        break;
      case ActionKind::kReceive:
        received_.insert(KeyOf(a));
        break;
    }
    if (a.is_compute()) run_.busy[w] += clock - run_.start[w][next_[w]];
    ++next_[w];
  }

  absl::Status Deadlock() const {
    std::vector<std::string> stuck;
    for (int w = 0; w < plan_.workers(); ++w) {
      if (next_[w] >= plan_.actions[w].size()) continue;
      const Action& a = plan_.actions[w][next_[w]];
      stuck.push_back(absl::StrCat("worker ", w, " at its action ", next_[w], " (", ToString(a),
                                   ") waits for worker ", planned_sends_.at(KeyOf(a))));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("schedule ", plan_.name, " deadlocks: ", absl::StrJoin(stuck, "; ")));
  }

  absl::Status Complete() const {
    for (int s = 0; s < plan_.stages(); ++s) {
      for (int i = 0; i < plan_.micro_batches; ++i) {
        const Progress& p = progress_[s][i];
        if (p.forward && p.input_backward && p.weight_backward) continue;
        const std::string missing = !p.forward ? ToString(Forward(s, i))
                                    : !p.input_backward
                                        ? absl::StrCat(ToString(InputBackward(s, i)), " (or ",
                                                       ToString(FullBackward(s, i)), ")")
                                        : ToString(WeightBackward(s, i));
        return absl::InvalidArgumentError(
            absl::StrCat("schedule ", plan_.name, ": ", missing, " is never run (worker ",
                         plan_.worker_of_stage[s], "'s list lacks it)"));
      }
    }
    return absl::OkStatus();
  }

  const SchedulePlan& plan_;
  const ActionCosts costs_;
  std::vector<std::vector<Progress>> progress_;  // stage -> micro-batch -> progress
  std::vector<size_t> next_;                     // worker -> its next action
  std::vector<double> clock_;                    // worker -> when its last action ended
  std::vector<int> held_;                        // worker -> activations held now
  std::map<TransferKey, int> planned_sends_;     // every send in the plan -> its worker
  std::set<TransferKey> sent_, received_;
  std::map<TransferKey, double> arrived_;  // sent -> when it can be received
  PlanRun run_;
};

}  // namespace

absl::StatusOr<PlanRun> SimulatePlan(const SchedulePlan& plan, const ActionCosts& costs) {
  if (plan.workers() == 0 || plan.stages() == 0 || plan.micro_batches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule ", plan.name, ": no workers, stages or micro-batches"));
  }
  for (int worker : plan.worker_of_stage) {
    if (worker < 0 || worker >= plan.workers()) {
      return absl::InvalidArgumentError(absl::StrCat("schedule ", plan.name,
                                                     ": a stage is placed on worker ", worker,
                                                     " of ", plan.workers()));
    }
  }
  return Simulation(plan, costs).Run();
}

}  // namespace tessera::pipeline
