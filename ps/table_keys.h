// TableKeys: one table's part of a parameter-server call of several tables
// (PsClient::Pull, PsClient::Push): its keys, and for a push their
// gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace tessera::ps {

struct TableKeys {
  std::string table;
  at::Tensor keys;
  at::Tensor grads;  // Push only
};

}  // namespace tessera::ps
