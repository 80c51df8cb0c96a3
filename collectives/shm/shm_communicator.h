// Collectives among the ranks of one host through one shared-memory
// segment (see Note [Shared-memory collectives] in shm_communicator.cc).
//
// Synchronous: each call returns when this rank's part is done. All local
// ranks must make the same calls in the same order; each call's kind, dtype,
// element count, root and op are compared across ranks before any data is
// read, so a mismatch is an error naming both ranks, not corruption. Every
// wait is bounded by `timeout`; a local rank that died is named within
// ~20 ms of the wait that needs it. After an error the communicator is
// broken: every later call fails with the first error, and the other local
// ranks waiting for this one fail at once, naming it.
//
// Thread-compatible: one call at a time (the process group's queue).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "collectives/shm/shm_barrier.h"
#include "collectives/shm/shm_pieces.h"
#include "collectives/shm/shm_segment.h"

namespace tessera::collectives {

class ShmCommunicator final : private ShmPieces {
 public:
  // Bytes of a segment for `local_size` ranks with `slot_bytes` per buffer.
  static size_t SegmentBytes(int local_size, size_t slot_bytes);
  // The slot size used unless the options set one (the segment holds two
  // slots per rank).
  // Pieces this size stay in the caches between being copied in, reduced
  // and copied out: on this 2-core EPYC (1 MiB L2 per core) 128-512 KiB
  // pieces gave 3-4 GB/s at 64 MiB where 4 MiB pieces gave ~2
  // (docs/benchmarks-history.md, "Shared-memory collectives"). A segment is then
  // 1 MiB per local rank.
  static constexpr size_t kDefaultSlotBytes = size_t{512} << 10;

  // `global_ranks[i]` is local rank i's rank in the job (for messages).
  ShmCommunicator(std::unique_ptr<ShmSegment> segment, int local_rank,
                  std::vector<int> global_ranks, size_t slot_bytes, absl::Duration timeout);

  // Local rank 0, on its new segment, before publishing its name.
  void InitializeSegment();
  // Marks this rank alive, checks the segment's shape, and waits (until
  // `deadline`) for every local rank to attach; the last to attach removes
  // the segment's name (see Note [Shared-memory names]).
  absl::Status Attach(absl::Time deadline);

  const std::string& segment_name() const { return segment_->name(); }

  // `tensor` reduced across local ranks, in place (kAverage divides by the
  // local size).
  absl::Status Allreduce(const at::Tensor& tensor, ReduceOp op);
  // Local rank `root`'s `tensor` into every local rank's `tensor`.
  absl::Status Broadcast(const at::Tensor& tensor, int root);
  // `output` = every local rank's `input`, in local rank order.
  absl::Status Allgather(const at::Tensor& input, const at::Tensor& output);
  // `output` = this local rank's chunk of the reduction of `input`s.
  absl::Status ReduceScatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op);
  absl::Status Barrier();
  // Breaks the communicator with `cause` (a step outside it failed, e.g.
  // the leaders'): the other local ranks stop waiting for this one at once.
  void Abort(const absl::Status& cause);

 private:
  struct Description;
  enum class Kind : int32_t;

  static size_t ControlBytes(size_t local_size);
  // Local rank `local_rank`'s description of call parity `parity`.
  Description& described(int local_rank, uint64_t parity) const;

  // ShmPieces, for the algorithms (shm_pieces.h).
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return static_cast<int>(global_ranks_.size()); }
  size_t slot_bytes() const override { return slot_bytes_; }
  uint8_t* slot(int local_rank, int buffer) const override;
  int NextBuffer() override { return static_cast<int>(pieces_++ & 1); }
  absl::Status Phase() override;

  // Starts a call: fails if broken, records this rank's description.
  absl::Status Begin(Kind kind, const at::Tensor* tensor, int64_t numel, int root, ReduceOp op);
  // Ends a call, breaking the communicator on error.
  absl::Status Finish(absl::Status status);
  absl::Status CheckDescriptions() const;

  const std::unique_ptr<ShmSegment> segment_;
  const int local_rank_;
  const std::vector<int> global_ranks_;
  const size_t slot_bytes_;
  const absl::Duration timeout_;
  uint8_t* const data_;
  ShmBarrier barrier_;

  absl::Status broken_;
  uint64_t calls_ = 0;   // calls made, same on every local rank
  uint64_t pieces_ = 0;  // slot buffers used, alternating between two
  bool first_arrival_ = false;
  const char* call_name_ = "";
  absl::Time deadline_;
};

}  // namespace tessera::collectives
