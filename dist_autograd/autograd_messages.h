// Distributed autograd's messages (see Note [Typed internal services],
// rpc/internal_service.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "rpc/service_names.h"

namespace tessera::dist_autograd {

// Runs the backward pass from the send function `send_id` of context
// `context_id` on the worker that sent the forward message, with the
// gradients of what it sent. Answers once that part of the pass (and all
// it started further on) is done.
struct BackwardRequest {
  static constexpr const char* kService = rpc::services::kAutogradBackward;
  // The engine's own traffic: never recorded as part of the graph.
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  int64_t context_id = 0;
  int64_t send_id = 0;
  std::vector<at::Tensor> grads;
  auto Fields() { return std::tie(context_id, send_id, grads); }
};

// Releases the context on the receiver (which passes it on).
struct ReleaseRequest {
  static constexpr const char* kService = rpc::services::kAutogradRelease;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  int64_t context_id = 0;
  auto Fields() { return std::tie(context_id); }
};

}  // namespace tessera::dist_autograd
