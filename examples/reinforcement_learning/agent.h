// Agent: the policy of the RPC tutorial's reinforcement-learning shape
// (one agent, several observers). Observers call SelectAction for every
// step of their episodes; after a round of episodes the agent improves the
// policy with REINFORCE over all of them.
//
// Policy: 4 -> 128 -> 2, ReLU, softmax over the two actions.
//
// Thread-safety: SelectAction from many threads (one per observer's call);
// FinishRound when no SelectAction is running.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"

namespace torch::optim {
class Optimizer;
}

namespace tessera::examples {

class Agent {
 public:
  Agent(uint64_t seed, double learning_rate, double gamma);
  ~Agent();

  // An action for `observer` in `state` (4 floats), sampled from the policy;
  // the state and action are kept for the update.
  int64_t SelectAction(int observer, const at::Tensor& state);

  // One REINFORCE step over the episodes since the last call: each
  // observer's episode had one reward of 1 per step it kept. Returns the
  // episodes' mean length.
  double FinishRound();

 private:
  at::Tensor Policy(const at::Tensor& state) const;

  const double gamma_;
  std::vector<at::Tensor> parameters_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  const uint64_t seed_;
  Mutex mu_;
  // One per observer, seeded from (seed, observer): an observer's actions
  // depend on its own states and the policy only, not on how the
  // observers' calls interleave, so a seed gives one run.
  std::map<int, at::Generator> generators_ ABSL_GUARDED_BY(mu_);
  // Per observer, this round's states (1 x 4) and the actions taken. The
  // update recomputes their log-probabilities in one pass, in observer
  // order: graphs built by concurrent calls would be summed in an order
  // that depends on the threads' interleaving, and a seed would not give
  // one run.
  std::map<int, std::vector<std::pair<at::Tensor, int64_t>>> steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::examples
