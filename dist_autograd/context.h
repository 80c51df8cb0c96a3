// Context: one distributed autograd context as one worker sees it — the
// send functions recorded here, the workers this worker sent to in it (so
// that releasing reaches them), and the gradients accumulated for local
// leaves by backward passes.
//
// Thread-safety: thread-safe; backward passes of one context may run
// concurrently on one worker.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "dist_autograd/rpc_functions.h"

namespace tessera::dist_autograd {

class Context {
 public:
  explicit Context(int64_t id) : id_(id) {}

  int64_t id() const { return id_; }

  void AddSend(int64_t send_id, std::shared_ptr<SendRpcBackward> send);
  // nullptr if this worker recorded no such send function in this context.
  std::shared_ptr<SendRpcBackward> FindSend(int64_t send_id) const;
  bool has_sends() const;

  void AddKnownWorker(int rank);
  std::vector<int> known_workers() const;

  // Adds `grad` to what `leaf` has accumulated in this context.
  void AccumulateGrad(const at::Tensor& leaf, const at::Tensor& grad);
  // What `leaf` has accumulated (undefined if nothing yet), and replacing
  // it (DDP's reducer writes averaged gradients back).
  at::Tensor Grad(const at::Tensor& leaf) const;
  void SetGrad(const at::Tensor& leaf, const at::Tensor& grad);
  // Leaf -> accumulated gradient (a copy of the map; tensors are shared).
  c10::Dict<at::Tensor, at::Tensor> gradients() const;

 private:
  const int64_t id_;
  mutable Mutex mu_;
  std::map<int64_t, std::shared_ptr<SendRpcBackward>> sends_ ABSL_GUARDED_BY(mu_);
  std::set<int> known_workers_ ABSL_GUARDED_BY(mu_);
  // Keyed by the leaf's TensorImpl: a leaf is one variable, whatever handle.
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> grads_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::dist_autograd
