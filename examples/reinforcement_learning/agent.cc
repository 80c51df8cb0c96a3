#include "examples/reinforcement_learning/agent.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>

#include <cmath>

namespace tessera::examples {

Agent::Agent(uint64_t seed, double learning_rate, double gamma) : gamma_(gamma), seed_(seed) {
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
  const at::Tensor row = state.reshape({1, 4});
  at::Tensor probabilities;
  {
    at::NoGradGuard no_grad;
    probabilities = Policy(row).exp();
  }
  MutexLock lock(&mu_);
  auto [it, added] = generators_.try_emplace(observer);
  if (added) it->second = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000 + observer);
  const int64_t action = at::multinomial(probabilities, 1, false, it->second).item<int64_t>();
  steps_[observer].emplace_back(row, action);
  return action;
}

double Agent::FinishRound() {
  std::vector<at::Tensor> states;
  std::vector<int64_t> actions;
  std::vector<double> returns;
  size_t episodes = 0;
  {
    MutexLock lock(&mu_);
    for (const auto& [observer, steps] : steps_) {
      // Discounted return from each step to the episode's end (reward 1 a step).
      std::vector<double> mine(steps.size());
      double running = 0;
      for (size_t t = steps.size(); t-- > 0;) mine[t] = running = 1 + gamma_ * running;
      returns.insert(returns.end(), mine.begin(), mine.end());
      for (const auto& [state, action] : steps) {
        states.push_back(state);
        actions.push_back(action);
      }
    }
    episodes = steps_.size();
    steps_.clear();
  }
  if (episodes == 0) return 0;
  at::Tensor normalized = at::tensor(returns).to(at::kFloat);
  normalized = (normalized - normalized.mean()) / (normalized.std() + 1e-8);
  at::Tensor log_probs = Policy(at::cat(states)).gather(1, at::tensor(actions).unsqueeze(1));
  at::Tensor loss = -(log_probs.squeeze(1) * normalized).sum();
  optimizer_->zero_grad();
  torch::autograd::backward({loss});
  optimizer_->step();
  return static_cast<double>(actions.size()) / static_cast<double>(episodes);
}

}  // namespace tessera::examples
