#include "dist_autograd/context.h"

#include <ATen/TensorOperators.h>

namespace tessera::dist_autograd {

void Context::AddSend(int64_t send_id, std::shared_ptr<SendRpcBackward> send) {
  MutexLock lock(&mu_);
  sends_[send_id] = std::move(send);
}

std::shared_ptr<SendRpcBackward> Context::FindSend(int64_t send_id) const {
  MutexLock lock(&mu_);
  auto it = sends_.find(send_id);
  return it == sends_.end() ? nullptr : it->second;
}

bool Context::has_sends() const {
  MutexLock lock(&mu_);
  return !sends_.empty();
}

void Context::AddKnownWorker(int rank) {
  MutexLock lock(&mu_);
  known_workers_.insert(rank);
}

std::vector<int> Context::known_workers() const {
  MutexLock lock(&mu_);
  return {known_workers_.begin(), known_workers_.end()};
}

void Context::AccumulateGrad(const at::Tensor& leaf, const at::Tensor& grad) {
  // Detached: the context's gradients are results, not part of any graph.
  at::Tensor value = grad.detach();
  MutexLock lock(&mu_);
  auto [it, inserted] = grads_.try_emplace(leaf.unsafeGetTensorImpl(), leaf, value);
  // Out of place: `value` may alias a buffer that another pass still reads.
  if (!inserted) it->second.second = it->second.second + value;
}

at::Tensor Context::Grad(const at::Tensor& leaf) const {
  MutexLock lock(&mu_);
  auto it = grads_.find(leaf.unsafeGetTensorImpl());
  return it == grads_.end() ? at::Tensor() : it->second.second;
}

void Context::SetGrad(const at::Tensor& leaf, const at::Tensor& grad) {
  MutexLock lock(&mu_);
  grads_.insert_or_assign(leaf.unsafeGetTensorImpl(), std::make_pair(leaf, grad.detach()));
}

c10::Dict<at::Tensor, at::Tensor> Context::gradients() const {
  c10::Dict<at::Tensor, at::Tensor> result;
  MutexLock lock(&mu_);
  for (const auto& [impl, entry] : grads_) result.insert(entry.first, entry.second);
  return result;
}

}  // namespace tessera::dist_autograd
