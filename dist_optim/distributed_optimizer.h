// DistributedOptimizer — the C++ counterpart of
// torch.distributed.optim.DistributedOptimizer: steps parameters wherever
// they live, through their RRefs, with one distributed autograd context's
// gradients.
//
//   std::vector<RRef<at::Tensor>> params = ps_params;      // owned by "ps"
//   dist_optim::SgdOptions sgd;
//   sgd.lr = 0.05;
//   sgd.momentum = 0.9;
//   auto optimizer = dist_optim::DistributedOptimizer::Create(worker->rrefs(), params, sgd);
//   {
//     dist_autograd::ContextGuard context(worker->autograd());
//     ... forward through the owners, worker->autograd().Backward(context.id(), {loss}) ...
//     optimizer.Step(context.id());
//   }
//
// Both throw StatusError naming the owner that failed. Each takes a last
// CallOptions (or absl::Duration) bounding it; zero, or none, means the
// runtime's default call timeout (see Note [One timeout convention]).
//
// Create() groups the parameters by owner and makes one LocalOptimizer per
// owner (with remote(); each owner must register the class, see
// local_optimizer.h), waiting until all exist so that bad options fail here.
// Step() runs every owner's step concurrently and returns when all are done;
// each owner serialises steps over the same parameters (ParameterGuard), so
// several trainers may step one parameter server at once without losing
// updates. Optimizer state (momentum, Adam moments) is per
// DistributedOptimizer, as in PyTorch. The LocalOptimizers are freed when the
// last copy of this object is.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/statusor.h"
#include "dist_optim/local_optimizer.h"
#include "dist_optim/optimizer_options.h"
#include "rpc/call_options.h"
#include "rref/rref.h"
#include "rref/rref_context.h"

namespace tessera::dist_optim {

class DistributedOptimizer {
 public:
  static DistributedOptimizer Create(rref::RRefContext& rrefs,
                                     const std::vector<rref::RRef<at::Tensor>>& params,
                                     const OptimizerOptions& options,
                                     const rpc::CallOptions& call = {});

  void Step(int64_t context_id, const rpc::CallOptions& options = {}) const;
  // The same, as a future (each owner's failure named in its status).
  Future<bool> StepAsync(int64_t context_id, const rpc::CallOptions& options = {}) const;

  // For checkpoints: each owner's optimizer state (in the order of the
  // owners' first parameters), and back into an optimizer created over the
  // same parameters. Throw StatusError naming the owner that failed.
  std::vector<at::Tensor> SaveState(const rpc::CallOptions& options = {}) const;
  void LoadState(const std::vector<at::Tensor>& states, const rpc::CallOptions& options = {}) const;

  // How many owners the parameters live on.
  size_t num_owners() const { return optimizers_.size(); }

 private:
  DistributedOptimizer() = default;
  std::vector<rref::RRef<LocalOptimizer>> optimizers_;
  rref::RRefContext* rrefs_ = nullptr;
};

}  // namespace tessera::dist_optim
