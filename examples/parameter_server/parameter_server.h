// The parameter server of the example: it owns the CNN's parameters, runs
// the forward pass for trainers (inside their distributed autograd
// contexts, so backward comes back here), and hands out RRefs to the
// parameters for their DistributedOptimizers.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "rpc/call_context.h"
#include "rref/rref.h"

namespace tessera::examples {

class ParameterServer {
 public:
  explicit ParameterServer(uint64_t seed);

  // RRefs to the parameters, owned here.
  std::vector<rref::RRef<at::Tensor>> Parameters(rpc::CallContext& ctx);
  // Logits for `images`. Computed on a snapshot of the parameters taken
  // under their ParameterGuard: trainers step the parameters in place while
  // other trainers' graphs still need the values their forward saw.
  at::Tensor Forward(at::Tensor images);
  // Accuracy (0..1) of the current parameters on `images`/`labels`.
  double Accuracy(const at::Tensor& images, const at::Tensor& labels);
  // For checkpoints: a copy of the parameters ("param.<i>"), taken under
  // their ParameterGuard; and back (before serving). Load throws
  // StatusError if the checkpoint's parameters do not fit.
  std::map<std::string, at::Tensor> Snapshot();
  void Load(const std::map<std::string, at::Tensor>& tensors);

 private:
  std::vector<at::Tensor> params_;
};

}  // namespace tessera::examples
