#include "collectives/process_group.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/trace.h"

namespace tessera::collectives {
namespace {

// Allgather's output and reduce-scatter's input (`whole`) must hold `ranks`
// chunks like `chunk`: same dtype, same device.
absl::Status CheckWholeAndChunk(const char* op, const at::Tensor& whole, const at::Tensor& chunk,
                                int ranks) {
  if (whole.numel() != chunk.numel() * ranks || whole.scalar_type() != chunk.scalar_type() ||
      whole.device() != chunk.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the whole tensor must hold ", ranks, " x ", chunk.numel(), " elements of ",
        c10::toString(chunk.scalar_type()), " on ", chunk.device().str()));
  }
  return absl::OkStatus();
}

}  // namespace

template <typename Start>
Work ProcessGroup::Traced(const char* op, const at::Tensor* sized, int peer, Start start) {
  if (!traced_.load(std::memory_order_relaxed)) return start();
  const int64_t bytes = sized != nullptr && sized->defined() ? sized->nbytes() : 0;
  auto span = std::make_shared<trace::Span>(
      trace::Span::Begin(trace::Track::kCollectives, "collective", op));
  span->Arg("bytes", bytes);
  if (peer >= 0) span->Arg("peer", peer);
  const absl::Time started = absl::Now();
  Work work = start();
  work.OnReady([span, op, started](const absl::StatusOr<std::monostate>& done) {
    metrics::RecordCollective(op, absl::Now() - started);
    if (!done.ok()) span->Arg("status", absl::StatusCodeToString(done.status().code()));
    span->End();
  });
  return work;
}

Work ProcessGroup::Allreduce(at::Tensor tensor, ReduceOp op) {
  if (auto s = Check("allreduce", {&tensor}); !s.ok()) return Work::Ready(s);
  return Traced("allreduce", &tensor, -1, [&] { return DoAllreduce(tensor, op); });
}

Work ProcessGroup::Broadcast(at::Tensor tensor, int root) {
  if (auto s = Check("broadcast", {&tensor}); !s.ok()) return Work::Ready(s);
  // A wrapping group leaves the root to its inner group: the DETAIL checks
  // compare it across ranks first, so a rank with another root fails every
  // rank at once, not only itself.
  if (backend_ != nullptr && (root < 0 || root >= size())) {
    return Work::Ready(absl::InvalidArgumentError(
        absl::StrCat("broadcast: root ", root, " is not a rank of this group of ", size())));
  }
  return Traced("broadcast", &tensor, root, [&] { return DoBroadcast(tensor, root); });
}

Work ProcessGroup::Barrier() {
  return Traced("barrier", nullptr, -1, [&] { return DoBarrier(); });
}

Work ProcessGroup::Allgather(at::Tensor input, at::Tensor output) {
  if (auto s = Check("allgather", {&input, &output}, &output, &input); !s.ok()) {
    return Work::Ready(s);
  }
  return Traced("allgather", &output, -1, [&] { return DoAllgather(input, output); });
}

Work ProcessGroup::ReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  if (auto s = Check("reduce_scatter", {&input, &output}, &input, &output); !s.ok()) {
    return Work::Ready(s);
  }
  return Traced("reduce_scatter", &input, -1, [&] { return DoReduceScatter(input, output, op); });
}

Work ProcessGroup::Send(at::Tensor tensor, int dst, uint64_t tag) {
  if (auto s = Check("send", {&tensor}); !s.ok()) return Work::Ready(s);
  if (auto s = CheckPeer("send", dst); !s.ok()) return Work::Ready(s);
  return Traced("send", &tensor, dst, [&] { return DoSend(tensor, dst, tag); });
}

Work ProcessGroup::Recv(at::Tensor tensor, int src, uint64_t tag) {
  if (auto s = Check("recv", {&tensor}); !s.ok()) return Work::Ready(s);
  if (auto s = CheckPeer("recv", src); !s.ok()) return Work::Ready(s);
  return Traced("recv", &tensor, src, [&] { return DoRecv(tensor, src, tag); });
}

absl::Status ProcessGroup::CheckTensor(const char* op, const at::Tensor& tensor) const {
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the ", backend_, " backend takes defined, contiguous CPU tensors"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::CheckPeer(const char* op, int peer) const {
  if (backend_ == nullptr) return absl::OkStatus();  // the wrapped group checks
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": peer ", peer,
                                                   " is not another rank of this group of ", size(),
                                                   " (this is rank ", rank(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::Check(const char* op, std::initializer_list<const at::Tensor*> tensors,
                                 const at::Tensor* whole, const at::Tensor* chunk) const {
  if (backend_ == nullptr) return absl::OkStatus();  // the wrapped group checks
  for (const at::Tensor* tensor : tensors) TESSERA_RETURN_IF_ERROR(CheckTensor(op, *tensor));
  if (whole != nullptr) TESSERA_RETURN_IF_ERROR(CheckWholeAndChunk(op, *whole, *chunk, size()));
  return absl::OkStatus();
}

std::unique_ptr<ProcessGroup> WithTracing(std::unique_ptr<ProcessGroup> group) {
  // A job of process groups alone (no RPC runtime to start them) traces
  // and counts as its environment says, to rank<r>.json.
  const int rank = group->rank();
  if (absl::Status traced = trace::StartFromEnvironment(absl::StrCat("rank", rank), rank);
      !traced.ok()) {
    TESSERA_LOG(WARNING) << "rank " << rank << " is not traced: " << traced;
  }
  metrics::EnableFromEnvironment();
  group->traced_.store(trace::Enabled() || metrics::Enabled(), std::memory_order_relaxed);
  return group;
}

void CompleteWork(const Promise<std::monostate>& done, const absl::Status& status) {
  if (status.ok()) {
    done.Set(std::monostate{});
  } else {
    done.Set(status);
  }
}

}  // namespace tessera::collectives
