// The local part of a distributed backward pass, on LibTorch's engine.
#pragma once

#include <torch/csrc/autograd/edge.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dist_autograd/context.h"
#include "dist_autograd/rpc_functions.h"

namespace tessera::dist_autograd {

// The gradients that reached one recv function: they go to its sender.
struct RecvGradients {
  std::shared_ptr<RecvRpcBackward> recv;
  std::vector<at::Tensor> grads;  // one per recv input, zeros where none arrived
};

// Runs LibTorch's engine from `roots` fed with `grads`. The graph's sinks
// reachable from the roots — leaves' gradient accumulators and recv
// functions — are the engine's outputs, so neither runs: leaf gradients are
// added to `context` (never to .grad), after which the accumulators' post
// hooks run with the context as the current GradientSink (so DDP's reducer
// averages them there), and the gradients that reached recv functions are
// returned for the caller to ship. A hook's exception fails the pass. Engine errors (a graph
// already freed, a backward function that throws) come back as a status.
absl::StatusOr<std::vector<RecvGradients>> RunLocalPass(
    Context& context, const torch::autograd::edge_list& roots,
    const std::vector<at::Tensor>& grads, bool keep_graph);

}  // namespace tessera::dist_autograd
