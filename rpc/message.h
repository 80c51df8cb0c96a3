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
};

}  // namespace tessera::rpc
