// The list scheduler behind the zero-bubble plans (pipeline/schedules.h):
// it plays a step out with every F, B and W taking one unit of time and
// transfers none, and each worker, whenever it is free, starts
//   1. a B whose output gradient is there (the oldest micro-batch; B is on
//      the path of every stage before it),
//   2. else the next F of one of its stages whose input is there, while it
//      holds fewer than `max_held` micro-batches' activations (the later
//      stage first, to finish micro-batches and free their memory),
//   3. else the oldest W it owes (W is on nobody's path, so it fills what
//      would be idle time),
// and waits otherwise. The order each worker started its actions in is the
// plan; run with other costs it stays correct (CheckPlan), its bubble grows
// with how far the costs are from equal.
#pragma once

#include <vector>

#include "pipeline/action.h"

namespace tessera::pipeline {

// Each worker's F, B and W, in the order they started. `worker_of_stage`
// places the stages on workers 0 .. p - 1.
std::vector<std::vector<Action>> GreedyOrder(const std::vector<int>& worker_of_stage,
                                             int micro_batches, int max_held);
// The same with each worker's Fs and Bs in the order `order` gives them
// (its Ws, if any, are ignored): only the Ws are placed, each where the
// worker's next F or B cannot start yet, oldest first.
std::vector<std::vector<Action>> WithWeightsInGaps(const std::vector<int>& worker_of_stage,
                                                   int micro_batches, int max_held,
                                                   std::vector<std::vector<Action>> order);

}  // namespace tessera::pipeline
