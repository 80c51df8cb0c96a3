// A pipeline schedule as data: each worker's ordered list of actions.
//
// Note [Schedules as data]:
// A schedule is a function from (workers, model chunks per worker,
// micro-batches) to a SchedulePlan: for each worker the actions it runs, one
// at a time, in order (pipeline/schedules.h makes the known ones; a user may
// write their own). Stages are the model's chunks in model order,
// 0 .. S - 1; worker_of_stage places them: one a worker (GPipe, 1F1B,
// ZB-H1), v a worker round-robin (Interleaved 1F1B: worker r holds stages
// r, r + p, ...), or two a worker in a V (ZBV: worker r holds r and
// 2p - 1 - r, so the first and last stage share worker 0).
//
// A micro-batch i at stage s runs F (forward, keeping its activations), B
// (the gradient of the stage's input, from the gradient of its output) and
// W (the parameters' gradients, after B; frees the activations). Splitting
// the backward lets a schedule run W later, in what would be idle time (the
// zero-bubble schedules, Qi et al., ICLR 2024); GPipe and 1F1B run both as
// one backward pass, BW, and send its gradient once both are done. What crosses
// workers is explicit: a send after the F or B (BW) that made it, a receive
// before the F or B (BW) that needs it (WithTransfers adds them); between two
// stages on one worker nothing is sent. Sends do not wait; a receive waits
// for its send. CheckPlan (pipeline/plan_simulator.h) proves a plan can
// run: it never waits forever, and never uses an activation before its F
// or after its W.
#pragma once

#include <string>
#include <vector>

#include "pipeline/action.h"

namespace tessera::pipeline {

struct SchedulePlan {
  std::string name;
  int micro_batches = 0;
  std::vector<int> worker_of_stage;          // stage -> the worker that runs it
  std::vector<std::vector<Action>> actions;  // worker -> its actions, in order

  int stages() const { return static_cast<int>(worker_of_stage.size()); }
  int workers() const { return static_cast<int>(actions.size()); }
  // One line a worker: "worker 0: F0@0 send act 0 0->1 F1@0 ...".
  std::string Print() const;
};

// Placements of `stages_per_worker` x `workers` stages.
std::vector<int> LoopedPlacement(int workers, int stages_per_worker);  // r, r + p, ...
std::vector<int> VPlacement(int workers);                              // r and 2p - 1 - r

// The plan whose workers compute `compute[w]` (F, B, W and BW only) in order,
// with a receive before each F or B whose input another worker makes, and
// a send after each F or B whose output another worker needs.
SchedulePlan WithTransfers(std::string name, int micro_batches, std::vector<int> worker_of_stage,
                           const std::vector<std::vector<Action>>& compute);

}  // namespace tessera::pipeline
