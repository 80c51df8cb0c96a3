// One training step of the distributed-autograd examples (parameter server,
// pipeline): forward in a fresh autograd context, cross-entropy loss,
// backward across every worker the forward touched, one optimizer step on
// every parameter's owner.
#pragma once

#include <ATen/ops/cross_entropy_loss.h>

#include <functional>

#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"

namespace tessera::examples {

// `forward` maps the batch to logits (through RPCs); returns the loss.
inline double DistAutogradStep(dist_autograd::DistAutograd& autograd,
                               const dist_optim::DistributedOptimizer& optimizer,
                               const at::Tensor& labels,
                               const std::function<at::Tensor()>& forward) {
  dist_autograd::ContextGuard context(autograd);
  at::Tensor loss = at::cross_entropy_loss(forward(), labels);
  autograd.Backward(context.id(), {loss});
  optimizer.Step(context.id());
  return loss.item<double>();
}

}  // namespace tessera::examples
