// The DDP benchmarks' model: a 4-layer MLP, 1024 wide (4.2 M parameters,
// ~16 MB of gradients), the same on every rank (seed 0). Its PyTorch twin is
// bench/torch_mlp.py.
#pragma once

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <memory>

namespace tessera::bench {

inline std::shared_ptr<torch::nn::SequentialImpl> Mlp1024() {
  torch::manual_seed(0);
  return std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(1024, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
      torch::nn::ReLU(), torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
      torch::nn::Linear(1024, 1024));
}

}  // namespace tessera::bench
