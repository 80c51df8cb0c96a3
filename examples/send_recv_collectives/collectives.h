// Collectives built from point-to-point Send and Recv (the ARENA exercise
// that leads up to DDP): a broadcast (binomial tree) and a ring all-reduce
// (reduce-scatter then all-gather around the ring, each rank sending
// 2 (n-1)/n of the data — what makes ring all-reduce bandwidth-optimal).
// For teaching and checking against ProcessGroup's own collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "collectives/process_group.h"

namespace tessera::examples {

// Copies `root`'s `tensor` into every rank's, in ceil(log2 n) rounds: in
// round k the ranks that have it send to the rank 2^k further on.
absl::Status TreeBroadcast(collectives::ProcessGroup& group, at::Tensor& tensor, int root,
                           absl::Duration timeout);

// Sums `tensor` (1-D, contiguous) across ranks into every rank's tensor: n
// chunks; n - 1 steps of reduce-scatter (send chunk i to the next rank, add
// the one received from the previous), then n - 1 of all-gather.
absl::Status RingAllreduce(collectives::ProcessGroup& group, at::Tensor& tensor,
                           absl::Duration timeout);

}  // namespace tessera::examples
