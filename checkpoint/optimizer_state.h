// An optimizer's state (Adam's moments and step counts, SGD's momentum
// buffers) as a tensor of bytes, to go into a Checkpoint next to the model
// (checkpoint/checkpoint.h), and back into an optimizer over the same
// parameters, in the same order.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace tessera::checkpoint {

// LibTorch's own serialization of `optimizer`'s state, as a uint8 tensor.
at::Tensor SaveOptimizerState(const torch::optim::Optimizer& optimizer);

// Restores what SaveOptimizerState wrote. Throws StatusError (DataLoss) if
// `state` is not such bytes, or was saved for other parameters.
void LoadOptimizerState(torch::optim::Optimizer& optimizer, const at::Tensor& state);

}  // namespace tessera::checkpoint
