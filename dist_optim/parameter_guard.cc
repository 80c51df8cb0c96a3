#include "dist_optim/parameter_guard.h"

#include <algorithm>
#include <map>

namespace tessera::dist_optim {
namespace {

// One mutex per live parameter (by TensorImpl), shared by all guards;
// entries go when no guard holds them.
std::vector<std::shared_ptr<std::mutex>> LocksFor(const std::vector<at::Tensor>& params) {
  static std::mutex table_mu;
  static auto* table = new std::map<const c10::TensorImpl*, std::weak_ptr<std::mutex>>();
  std::vector<const c10::TensorImpl*> impls;
  for (const auto& param : params) impls.push_back(param.unsafeGetTensorImpl());
  std::sort(impls.begin(), impls.end());
  impls.erase(std::unique(impls.begin(), impls.end()), impls.end());
  std::vector<std::shared_ptr<std::mutex>> locks;
  std::lock_guard<std::mutex> lock(table_mu);
  for (auto it = table->begin(); it != table->end();) {
    it = it->second.expired() ? table->erase(it) : std::next(it);
  }
  for (const auto* impl : impls) {
    auto& entry = (*table)[impl];
    auto mutex = entry.lock();
    if (mutex == nullptr) {
      mutex = std::make_shared<std::mutex>();
      entry = mutex;
    }
    locks.push_back(std::move(mutex));
  }
  return locks;
}

}  // namespace

ParameterGuard::ParameterGuard(const std::vector<at::Tensor>& params)
    : locks_(LocksFor(params)) {
  for (const auto& mutex : locks_) mutex->lock();
}

ParameterGuard::~ParameterGuard() {
  for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) (*it)->unlock();
}

}  // namespace tessera::dist_optim
