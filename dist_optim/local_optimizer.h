// LocalOptimizer: the owner's side of a DistributedOptimizer — LibTorch's
// optimizer over the parameters this worker owns, stepped with the
// gradients a distributed autograd context accumulated here. Created on the
// owner with remote() by DistributedOptimizer; every worker that owns
// parameters registers the class (RegisterLocalOptimizer).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rpc/call_context.h"
#include "rref/class_registry.h"
#include "rref/rref.h"

namespace torch::optim {
class Optimizer;
}

namespace tessera::dist_optim {

class LocalOptimizer {
 public:
  static constexpr char kClassName[] = "tessera.dist_optim.LocalOptimizer";

  // `params` must be owned here. Throws (an error of remote()) when they
  // are not, or the options are invalid.
  LocalOptimizer(std::vector<rref::RRef<at::Tensor>> params, std::string kind,
                 std::map<std::string, double> options);
  ~LocalOptimizer();

  int64_t NumParams() const { return static_cast<int64_t>(params_.size()); }
  // One optimizer step with the gradients of `context_id` on this worker
  // (parameters without a gradient there are left alone), under a
  // ParameterGuard over the parameters.
  absl::Status Step(rpc::CallContext& ctx, int64_t context_id);
  // For checkpoints: the optimizer's state as bytes (Adam's moments and step
  // counts; checkpoint/optimizer_state.h), and back.
  at::Tensor State();
  absl::Status LoadState(at::Tensor state);

 private:
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// Registers LocalOptimizer in `classes` under LocalOptimizer::kClassName.
void RegisterLocalOptimizer(rref::ClassRegistry& classes);

}  // namespace tessera::dist_optim
