#include "examples/reinforcement_learning/agent.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>

#include <cmath>

namespace tessera::examples {

Agent::Agent(uint64_t seed, double learning_rate, double gamma)
    : gamma_(gamma), generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {
  at::Generator init = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{4, 128}, {128, 2}}) {
    parameters_.push_back((at::randn({out, in}, init) / std::sqrt(in)).set_requires_grad(true));
    parameters_.push_back(at::zeros({out}).set_requires_grad(true));
  }
  optimizer_ =
      std::make_unique<torch::optim::Adam>(parameters_, torch::optim::AdamOptions(learning_rate));
}

Agent::~Agent() = default;

at::Tensor Agent::Policy(const at::Tensor& state) const {
  at::Tensor hidden = at::relu(at::addmm(parameters_[1], state, parameters_[0].t()));
  return at::log_softmax(at::addmm(parameters_[3], hidden, parameters_[2].t()), 1);
}

int64_t Agent::SelectAction(int observer, const at::Tensor& state) {
  at::Tensor log_probs = Policy(state.reshape({1, 4}));
  MutexLock lock(&mu_);
  const int64_t action =
      at::multinomial(log_probs.detach().exp(), 1, false, generator_).item<int64_t>();
  log_probs_[observer].push_back(log_probs[0][action]);
  return action;
}

double Agent::FinishRound() {
  std::vector<at::Tensor> picked;
  std::vector<double> returns;
  size_t episodes = 0;
  {
    MutexLock lock(&mu_);
    for (auto& [observer, log_probs] : log_probs_) {
      // Discounted return from each step to the episode's end (reward 1 a step).
      std::vector<double> mine(log_probs.size());
      double running = 0;
      for (size_t t = log_probs.size(); t-- > 0;) mine[t] = running = 1 + gamma_ * running;
      returns.insert(returns.end(), mine.begin(), mine.end());
      picked.insert(picked.end(), log_probs.begin(), log_probs.end());
    }
    episodes = log_probs_.size();
    log_probs_.clear();
  }
  if (episodes == 0) return 0;
  at::Tensor normalized = at::tensor(returns);
  normalized = (normalized - normalized.mean()) / (normalized.std() + 1e-8);
  at::Tensor loss = -(at::stack(picked) * normalized.to(at::kFloat)).sum();
  optimizer_->zero_grad();
  torch::autograd::backward({loss});
  optimizer_->step();
  return static_cast<double>(picked.size()) / static_cast<double>(episodes);
}

}  // namespace tessera::examples
