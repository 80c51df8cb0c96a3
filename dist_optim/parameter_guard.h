// ParameterGuard: exclusive use of a set of parameter tensors on their
// owner. Every LocalOptimizer step holds one over its parameters, so steps
// of several trainers' optimizers over the same parameters run one at a
// time (disjoint sets run concurrently); code on the owner that reads the
// parameters (a parameter server's forward) can take one to see no step
// half done.
//
// The lock table is per process, deliberately: parameters are process-level
// objects, and the guard must cover every optimizer that touches them,
// whichever runtime created it. Locks are taken in address order, so
// overlapping sets cannot deadlock.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <vector>

namespace tessera::dist_optim {

class ParameterGuard {
 public:
  explicit ParameterGuard(const std::vector<at::Tensor>& params);
  ~ParameterGuard();
  ParameterGuard(const ParameterGuard&) = delete;
  ParameterGuard& operator=(const ParameterGuard&) = delete;

 private:
  std::vector<std::shared_ptr<std::mutex>> locks_;  // in locking order
};

}  // namespace tessera::dist_optim
