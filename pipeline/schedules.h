// The schedules Tessera provides, as plans (see Note [Schedules as data],
// pipeline/schedule_plan.h), for p workers and m micro-batches. With F, B
// and W of equal cost (a chunk of half a stage costing half) the bubble —
// the share of a step a worker waits, SimulatePlan's idle_fraction — is
//   GPipe, 1F1B            (p - 1) / (m + p - 1)
//   Interleaved 1F1B       (p - 1) / (v·m + p - 1), v chunks a worker
//   ZB-H1                  (p - 1) / (3m + p - 1)
//   ZBV                    (p - 1) / (6m + p - 1)
// The last two are their placements' floor: the last worker's first input
// comes after p - 1 forwards, a stage each for ZB-H1, half a stage for ZBV,
// and it has nothing to do before. Of the paper's two schedules with no
// bubble in steady state, ZBV is here rather than ZB-H2: ZB-H2 keeps one stage
// a worker, so it waits out the same p - 1 forwards as ZB-H1 (under equal
// costs it gains nothing on it) and holds 2p - 1 micro-batches; ZBV halves
// that wait within 1F1B's memory. The most micro-batches' activations a
// worker holds is m for GPipe, at most p for 1F1B and ZB-H1, and at most 2p
// chunks (p stages' worth) for ZBV. Each returns InvalidArgument for a
// shape it cannot run.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "pipeline/schedule_plan.h"

namespace tessera::pipeline {

// All m forwards, then each micro-batch's B and W (one stage a worker).
absl::StatusOr<SchedulePlan> GPipePlan(int workers, int micro_batches);
// PipeDream-Flush: worker r runs p - 1 - r forwards, then one forward and
// one backward (B, W) in turn, then the backwards left.
absl::StatusOr<SchedulePlan> OneFOneBPlan(int workers, int micro_batches);
// Megatron-LM's interleaved 1F1B: v chunks a worker (worker r holds stages
// r, r + p, ...), micro-batches in groups of p through each chunk in turn;
// m must be a multiple of p.
absl::StatusOr<SchedulePlan> Interleaved1F1BPlan(int workers, int chunks, int micro_batches);
// Zero bubble, handcrafted schedule 1 (Qi et al.): 1F1B's order of F and
// B, with each W put off into time a worker would wait, holding at most p
// micro-batches, as 1F1B's first stage does.
absl::StatusOr<SchedulePlan> ZeroBubbleH1Plan(int workers, int micro_batches);
// Zero bubble in a V (Qi et al., "Pipeline parallelism with controllable
// memory"): two chunks a worker, worker r holding stages r and 2p - 1 - r,
// so the last stage's loss turns into the backward on the worker that ran
// the first forward, with no wait for a transfer; W fills the gaps, within
// 1F1B's memory.
absl::StatusOr<SchedulePlan> ZeroBubbleVPlan(int workers, int micro_batches);

// By name: "gpipe", "1f1b", "interleaved" (`chunks` a worker), "zb-h1",
// "zbv"; `chunks` must be 1 for the others but ZBV's 2, which it ignores.
absl::StatusOr<SchedulePlan> MakePlan(const std::string& name, int workers, int chunks,
                                      int micro_batches);

}  // namespace tessera::pipeline
