// Runs a SchedulePlan on paper (see Note [Schedules as data],
// pipeline/schedule_plan.h): each worker takes its actions in order, a
// receive waits for its send, and every action takes the time `costs` give
// it. What it proves about a plan holds for any costs: the order in which
// an action's inputs are made does not depend on how long actions take.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/schedule_plan.h"

namespace tessera::pipeline {

// The time each kind of action takes, in any unit. A stage of a model cut
// in v chunks a worker costs 1/v of one cut in one.
struct ActionCosts {
  double forward = 1;
  double input_backward = 1;
  double weight_backward = 1;
  double transfer = 0;  // from a send to its receive's earliest end
};

struct PlanRun {
  double makespan = 0;                     // from the first action to the last one's end
  std::vector<double> busy;                // per worker: time spent in F, B and W
  std::vector<int> peak_activations;       // per worker: most micro-batches held (F run, W not)
  std::vector<std::vector<double>> start;  // per worker, per action: when it started

  // The share of the step a worker spends waiting: the bubble.
  double idle_fraction(int worker) const { return 1 - busy[worker] / makespan; }
};

// InvalidArgument naming the plan, the worker and its action when the plan
// cannot run: it waits forever (a deadlock: each stuck worker is named with
// what it waits for), uses an activation before its F or after its W, runs
// an action twice or on a worker that does not hold its stage, sends what is
// not made yet or to a stage on its own worker, or leaves some F, B or W
// of a micro-batch out.
absl::StatusOr<PlanRun> SimulatePlan(const SchedulePlan& plan, const ActionCosts& costs = {});
inline absl::Status CheckPlan(const SchedulePlan& plan) { return SimulatePlan(plan).status(); }

}  // namespace tessera::pipeline
