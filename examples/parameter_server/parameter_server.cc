#include "examples/parameter_server/parameter_server.h"

#include <ATen/ops/argmax.h>
#include <ATen/ops/eq.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/status/status.h"
#include "common/status.h"
#include "dist_optim/parameter_guard.h"
#include "examples/common/cnn.h"
#include "rpc/runtime.h"
#include "rref/remote.h"

namespace tessera::examples {

ParameterServer::ParameterServer(uint64_t seed) : params_(InitCnn(seed)) {}

std::vector<rref::RRef<at::Tensor>> ParameterServer::Parameters(rpc::CallContext& ctx) {
  return rref::MakeRRefs(ctx, params_);
}

at::Tensor ParameterServer::Forward(at::Tensor images) {
  forwards_.fetch_add(1);
  std::vector<at::Tensor> snapshot;
  {
    dist_optim::ParameterGuard guard(params_);
    // clone() is differentiable: gradients still reach the parameters.
    for (const auto& param : params_) snapshot.push_back(param.clone());
  }
  return CnnForward(snapshot, images);
}

std::map<std::string, at::Tensor> ParameterServer::Snapshot() {
  std::map<std::string, at::Tensor> tensors;
  dist_optim::ParameterGuard guard(params_);
  for (size_t i = 0; i < params_.size(); ++i) {
    tensors["param." + std::to_string(i)] = params_[i].detach().clone();
  }
  return tensors;
}

void ParameterServer::Load(const std::map<std::string, at::Tensor>& tensors) {
  torch::autograd::AutoGradMode no_grad(false);
  dist_optim::ParameterGuard guard(params_);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = tensors.find("param." + std::to_string(i));
    if (it == tensors.end() || !it->second.sizes().equals(params_[i].sizes())) {
      throw StatusError(absl::DataLossError("the checkpoint has no parameter " + std::to_string(i) +
                                            " of this model's shape"));
    }
    params_[i].copy_(it->second);
  }
}

double ParameterServer::Accuracy(const at::Tensor& images, const at::Tensor& labels) {
  torch::autograd::AutoGradMode no_grad(false);
  std::vector<at::Tensor> snapshot;
  {
    dist_optim::ParameterGuard guard(params_);
    for (const auto& param : params_) snapshot.push_back(param.detach().clone());
  }
  int64_t correct = 0;
  constexpr int64_t kChunk = 1000;
  for (int64_t start = 0; start < images.size(0); start += kChunk) {
    const int64_t end = std::min(start + kChunk, images.size(0));
    at::Tensor predicted = CnnForward(snapshot, images.slice(0, start, end)).argmax(1);
    correct += predicted.eq(labels.slice(0, start, end)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(images.size(0));
}

}  // namespace tessera::examples
