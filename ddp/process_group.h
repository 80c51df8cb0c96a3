// ProcessGroup: collectives over the ranks of a job (DDP's communication).
//
// Every operation returns a Work (a Future that completes once, with OK or
// an error) and is executed in the order it was issued; all ranks must
// issue the same operations in the same order. Tensors are contiguous CPU
// tensors, updated in place: float, double, half, bfloat16, int8, uint8,
// int32, int64. A missing rank fails the operation with DeadlineExceeded
// at the group's timeout instead of hanging; a rank that died fails it with
// Unavailable as soon as the backend sees it (a broken connection, a lost
// liveness lock), else at the timeout.
//
// Backends live in sub-packages behind factories (ddp/gloo/).
// Thread-safety: methods may be called from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <variant>

#include "absl/status/status.h"
#include "common/future.h"

namespace tessera::ddp {

enum class ReduceOp { kSum, kAverage, kMin, kMax, kProduct };

using Work = Future<std::monostate>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reduces `tensor` across all ranks; every rank ends with the result.
  virtual Work Allreduce(at::Tensor tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // Copies `root`'s `tensor` into every rank's `tensor`.
  virtual Work Broadcast(at::Tensor tensor, int root) = 0;
  // Completes once every rank has entered it.
  virtual Work Barrier() = 0;
  // output = the `input`s of all ranks, concatenated in rank order along
  // dimension 0 (output has size() times input's elements).
  virtual Work Allgather(at::Tensor input, at::Tensor output) = 0;
  // Reduces `input` (size() equal chunks along dimension 0) across ranks;
  // `output` receives this rank's chunk of the result.
  virtual Work ReduceScatter(at::Tensor input, at::Tensor output,
                             ReduceOp op = ReduceOp::kSum) = 0;
  // Point to point: `tag` pairs a Send with the matching Recv.
  virtual Work Send(at::Tensor tensor, int dst, uint64_t tag) = 0;
  virtual Work Recv(at::Tensor tensor, int src, uint64_t tag) = 0;
};

// For CPU backends: `tensor` must be defined, on the CPU and contiguous
// (`backend` names the backend in the error).
absl::Status CheckCpuTensor(const char* op, const at::Tensor& tensor, const char* backend);

// For backends. Allgather's output and reduce-scatter's input (`whole`) must
// hold `ranks` chunks like `chunk`: same dtype, same device.
absl::Status CheckWholeAndChunk(const char* op, const at::Tensor& whole, const at::Tensor& chunk,
                                int ranks);

// Why a collective may time out, for backends' timeout errors.
inline constexpr char kCollectiveTimeoutCauses[] =
    "a rank is missing, dead or issuing other collectives; TESSERA_DISTRIBUTED_DEBUG=DETAIL "
    "compares every collective across ranks";

// Completes a Work's promise with `status`.
void CompleteWork(const Promise<std::monostate>& done, const absl::Status& status);

}  // namespace tessera::ddp
