// Message: one envelope plus the tensors whose bytes travel beside it.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "proto/rpc.pb.h"

namespace tessera::rpc {

struct Message {
  proto::Envelope envelope;
  // tensors[i] is described by envelope.tensors(i); all contiguous, on CPU.
  std::vector<at::Tensor> tensors;
  // For an outgoing internal request: whether it carries user values, which
  // distributed autograd records (see Note [Typed internal services]). In
  // memory only, never on the wire; user calls always do.
  bool carries_user_values = true;
  // For an incoming request, when tracing or metrics are on: when its agent
  // had all of it, on the trace clock (see Note [Call telemetry]); else 0.
  double received_us = 0;
};

}  // namespace tessera::rpc
