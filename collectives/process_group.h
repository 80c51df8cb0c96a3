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
// Backends live in sub-packages behind factories (collectives/gloo/).
// Thread-safety: methods may be called from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <initializer_list>
#include <memory>
#include <variant>

#include "absl/status/status.h"
#include "common/future.h"

namespace tessera::collectives {

enum class ReduceOp { kSum, kAverage, kMin, kMax, kProduct };

using Work = Future<std::monostate>;

// Note [Traced collectives]: while tracing or counting metrics (common/
// trace.h, common/metrics.h), every collective of a group made by
// CreateGlooProcessGroup, CreateNcclProcessGroup or their FromEnv forms is
// a span on the "collectives" row, from the call to its completion (named
// by the operation, with its bytes and peer rank for point to point), and
// its time counts in the metrics by operation. Only the group a factory
// returns is traced, not the groups it is made of (a hierarchical group's
// leaders), so each collective is one span. Off, nothing is added.
//
// The public operations are the same for every backend: each checks its
// tensors (CheckTensor, and that a whole tensor holds size() chunks), is
// traced, and calls the backend's Do... of the same name.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reduces `tensor` across all ranks; every rank ends with the result.
  Work Allreduce(at::Tensor tensor, ReduceOp op = ReduceOp::kSum);
  // Copies `root`'s `tensor` into every rank's `tensor`.
  Work Broadcast(at::Tensor tensor, int root);
  // Completes once every rank has entered it.
  Work Barrier();
  // output = the `input`s of all ranks, concatenated in rank order along
  // dimension 0 (output has size() times input's elements).
  Work Allgather(at::Tensor input, at::Tensor output);
  // Reduces `input` (size() equal chunks along dimension 0) across ranks;
  // `output` receives this rank's chunk of the result.
  Work ReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op = ReduceOp::kSum);
  // Point to point: `tag` pairs a Send with the matching Recv.
  Work Send(at::Tensor tensor, int dst, uint64_t tag);
  Work Recv(at::Tensor tensor, int src, uint64_t tag);

 protected:
  // A backend: `backend` names it in errors ("Gloo").
  explicit ProcessGroup(const char* backend) : backend_(backend) {}
  // A group that wraps another, which checks the tensors: this one does not.
  struct Wrapping {};
  explicit ProcessGroup(Wrapping) : backend_(nullptr) {}

  // Whether this backend takes `tensor` for `op`: by default a defined,
  // contiguous CPU tensor.
  virtual absl::Status CheckTensor(const char* op, const at::Tensor& tensor) const;

  // The operations, their tensors checked.
  virtual Work DoAllreduce(at::Tensor tensor, ReduceOp op) = 0;
  virtual Work DoBroadcast(at::Tensor tensor, int root) = 0;
  virtual Work DoBarrier() = 0;
  virtual Work DoAllgather(at::Tensor input, at::Tensor output) = 0;
  virtual Work DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) = 0;
  virtual Work DoSend(at::Tensor tensor, int dst, uint64_t tag) = 0;
  virtual Work DoRecv(at::Tensor tensor, int src, uint64_t tag) = 0;

 private:
  friend std::unique_ptr<ProcessGroup> WithTracing(std::unique_ptr<ProcessGroup> group);

  // CheckTensor of each of `tensors`, and that `whole` holds size() chunks
  // like `chunk` (when given).
  absl::Status Check(const char* op, std::initializer_list<const at::Tensor*> tensors,
                     const at::Tensor* whole = nullptr, const at::Tensor* chunk = nullptr) const;
  // That `peer` is another rank of the group (a wrapping group: its inner
  // group checks).
  absl::Status CheckPeer(const char* op, int peer) const;
  // `start`()'s Work, a span and a metric while traced (of `sized`'s bytes,
  // to or from `peer` if not -1). Defined and used in process_group.cc.
  template <typename Start>
  Work Traced(const char* op, const at::Tensor* sized, int peer, Start start);

  const char* const backend_;  // null: a wrapping group
  std::atomic<bool> traced_{false};
};

// `group`, its collectives traced (see Note [Traced collectives]) when
// tracing or metrics are on, as the environment says for a job of process
// groups alone (to rank<r>.json).
std::unique_ptr<ProcessGroup> WithTracing(std::unique_ptr<ProcessGroup> group);

// Why a collective may time out, for backends' timeout errors.
inline constexpr char kCollectiveTimeoutCauses[] =
    "a rank is missing, dead or issuing other collectives; TESSERA_DISTRIBUTED_DEBUG=DETAIL "
    "compares every collective across ranks";

// Completes a Work's promise with `status`.
void CompleteWork(const Promise<std::monostate>& done, const absl::Status& status);

}  // namespace tessera::collectives
