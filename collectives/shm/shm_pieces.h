// ShmPieces: what a shared-memory algorithm sees of its call — two slots
// per local rank and the barrier between pieces — and the algorithms, one
// per file (shm_allreduce.cc, shm_broadcast.cc, shm_allgather.cc,
// shm_reduce_scatter.cc), each over it. ShmCommunicator (the segment, the
// calls' descriptions, a broken communicator) gives them their ShmPieces;
// see Note [Shared-memory collectives], collectives/shm/shm_communicator.cc.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collectives/process_group.h"

namespace tessera::collectives {

class ShmPieces {
 public:
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // Bytes of each slot.
  virtual size_t slot_bytes() const = 0;
  // Local rank `local_rank`'s slot `buffer` (0 or 1).
  virtual uint8_t* slot(int local_rank, int buffer) const = 0;
  // The buffer of the next piece: a piece's slots are written again only
  // two pieces later, after a phase every rank passed done reading them.
  virtual int NextBuffer() = 0;
  // Every local rank has reached this point; an error breaks the call.
  virtual absl::Status Phase() = 0;

 protected:
  ~ShmPieces() = default;
};

// `tensor` reduced across local ranks, in place (kAverage divides by the
// local size). `op` must be reducible for the dtype (CheckReducible).
absl::Status ShmAllreduce(ShmPieces& pieces, const at::Tensor& tensor, ReduceOp op);
// Local rank `root`'s `tensor` into every local rank's `tensor`.
absl::Status ShmBroadcast(ShmPieces& pieces, const at::Tensor& tensor, int root);
// `output` = every local rank's `input`, in local rank order.
absl::Status ShmAllgather(ShmPieces& pieces, const at::Tensor& input, const at::Tensor& output);
// `output` = this local rank's chunk of the reduction of `input`s.
absl::Status ShmReduceScatter(ShmPieces& pieces, const at::Tensor& input, const at::Tensor& output,
                              ReduceOp op);

}  // namespace tessera::collectives
