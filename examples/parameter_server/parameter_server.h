// The parameter server of the example: it owns the CNN's parameters, runs
// the forward pass for trainers (inside their distributed autograd
// contexts, so backward comes back here), and hands out RRefs to the
// parameters for their DistributedOptimizers.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
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
  // Forward passes run so far: a step's count of batches trained, plus one
  // for each batch whose trainer died after its forward (tests bound it).
  int64_t forwards() const { return forwards_.load(); }
  // For checkpoints: a copy of the parameters ("param.<i>"), taken under
  // their ParameterGuard; and back (before serving). Load throws
  // StatusError if the checkpoint's parameters do not fit.
  std::map<std::string, at::Tensor> Snapshot();
  void Load(const std::map<std::string, at::Tensor>& tensors);

 private:
  std::vector<at::Tensor> params_;
  std::atomic<int64_t> forwards_{0};
};

}  // namespace tessera::examples
