#include "collectives/shm/hierarchical_process_group.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/shm/shm_reduce.h"
#include "common/status.h"

// Note [Hierarchical collectives]
//
// On one host every collective is the shared-memory one. Across hosts:
// allreduce = local allreduce, leaders' allreduce (the flat backend among
// one rank per host), local broadcast from the leader; an average is summed
// at both levels and divided once, by the world size, on every rank alike.
// Broadcast = local broadcast on the root's host, leaders' broadcast, local
// broadcast on the other hosts. Barrier = local, leaders', local.
// Allgather = local allgather into a host block, leaders' allgather of the
// blocks, local broadcast, then each block's chunks put at their ranks'
// places (any rank order; hosts of unequal rank counts use the flat group).
// Reduce-scatter = the allreduce of a copy, this rank's chunk taken.
// Every rank gets the same bits: the leaders' backend gives every leader
// the same result, and the local steps copy it.

namespace tessera::collectives {

HierarchicalProcessGroup::HierarchicalProcessGroup(std::unique_ptr<ProcessGroup> flat,
                                                   std::unique_ptr<ShmCommunicator> local,
                                                   std::unique_ptr<ProcessGroup> leaders,
                                                   HostLayout layout, absl::Duration timeout)
    : ProcessGroup("shared-memory"),
      flat_(std::move(flat)),
      local_(std::move(local)),
      leaders_(std::move(leaders)),
      layout_(std::move(layout)),
      timeout_(timeout),
      queue_("shm-collectives") {}

HierarchicalProcessGroup::~HierarchicalProcessGroup() = default;

Work HierarchicalProcessGroup::Run(const char* what, std::function<absl::Status()> op) {
  Promise<std::monostate> done;
  const uint64_t ticket = queue_.Post([done, what, op = std::move(op)]() mutable {
    absl::Status status;
    try {
      status = op();
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
    }
    op = nullptr;  // the tensors go before the caller learns it is done
    CompleteWork(done, status);
  });
  done.SetWaitHook(queue_.InlineHook(ticket, timeout_));
  return done.GetFuture();
}

absl::Status HierarchicalProcessGroup::Await(Work work) const {
  // The leaders' group bounds its own collective by the same timeout; the
  // margin only keeps this wait from racing its error.
  auto result = work.Wait(timeout_ + absl::Seconds(5));
  if (result.ok()) return absl::OkStatus();
  // This host's other ranks wait for the leader's next local step: they
  // learn at once that it will not come.
  if (local_ != nullptr) local_->Abort(result.status());
  return result.status();
}

absl::Status HierarchicalProcessGroup::AllreduceNow(const at::Tensor& tensor, ReduceOp op) {
  if (layout_.hosts() == 1) return local_->Allreduce(tensor, op);
  const ReduceOp each = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  if (local_ != nullptr) TESSERA_RETURN_IF_ERROR(local_->Allreduce(tensor, each));
  if (leader()) TESSERA_RETURN_IF_ERROR(Await(leaders_->Allreduce(tensor, each)));
  if (local_ != nullptr) TESSERA_RETURN_IF_ERROR(local_->Broadcast(tensor, 0));
  if (op == ReduceOp::kAverage) {
    DivideElements(tensor.scalar_type(), tensor.data_ptr(), tensor.numel(), size());
  }
  return absl::OkStatus();
}

absl::Status HierarchicalProcessGroup::BroadcastNow(const at::Tensor& tensor, int root) {
  const int root_host = layout_.host_of_rank[root];
  const bool on_root_host = host() == root_host;
  if (local_ != nullptr && on_root_host) {
    TESSERA_RETURN_IF_ERROR(local_->Broadcast(tensor, layout_.local_rank_of[root]));
  }
  if (leader()) TESSERA_RETURN_IF_ERROR(Await(leaders_->Broadcast(tensor, root_host)));
  if (local_ != nullptr && !on_root_host) TESSERA_RETURN_IF_ERROR(local_->Broadcast(tensor, 0));
  return absl::OkStatus();
}

absl::Status HierarchicalProcessGroup::AllgatherNow(const at::Tensor& input,
                                                    const at::Tensor& output) {
  if (layout_.hosts() == 1) return local_->Allgather(input, output);
  const int per_host = static_cast<int>(layout_.ranks_of_host.front().size());
  const int64_t chunk = input.numel();
  at::Tensor block = at::empty({per_host * chunk}, input.options());
  if (local_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(local_->Allgather(input, block));
  } else {
    block.copy_(input.view({-1}));
  }
  at::Tensor blocks = at::empty({layout_.hosts() * per_host * chunk}, input.options());
  if (leader()) TESSERA_RETURN_IF_ERROR(Await(leaders_->Allgather(block, blocks)));
  if (local_ != nullptr) TESSERA_RETURN_IF_ERROR(local_->Broadcast(blocks, 0));
  const size_t bytes = input.nbytes();
  const auto* from = static_cast<const uint8_t*>(blocks.data_ptr());
  auto* to = static_cast<uint8_t*>(output.data_ptr());
  for (int h = 0; h < layout_.hosts(); ++h) {
    for (int l = 0; l < per_host; ++l) {
      const int rank = layout_.ranks_of_host[h][l];
      std::memcpy(to + rank * bytes, from + (h * per_host + l) * bytes, bytes);
    }
  }
  return absl::OkStatus();
}

Work HierarchicalProcessGroup::DoAllreduce(at::Tensor tensor, ReduceOp op) {
  if (auto s = CheckReducible(tensor.scalar_type(), op); !s.ok()) return Work::Ready(s);
  return Run("allreduce", [this, tensor, op] { return AllreduceNow(tensor, op); });
}

Work HierarchicalProcessGroup::DoBroadcast(at::Tensor tensor, int root) {
  return Run("broadcast", [this, tensor, root] { return BroadcastNow(tensor, root); });
}

Work HierarchicalProcessGroup::DoBarrier() {
  return Run("barrier", [this]() -> absl::Status {
    if (local_ != nullptr) TESSERA_RETURN_IF_ERROR(local_->Barrier());
    if (leader()) TESSERA_RETURN_IF_ERROR(Await(leaders_->Barrier()));
    if (local_ != nullptr && layout_.hosts() > 1) TESSERA_RETURN_IF_ERROR(local_->Barrier());
    return absl::OkStatus();
  });
}

Work HierarchicalProcessGroup::DoAllgather(at::Tensor input, at::Tensor output) {
  if (!layout_.Uniform()) return flat_->Allgather(input, output);
  return Run("allgather", [this, input, output] { return AllgatherNow(input, output); });
}

Work HierarchicalProcessGroup::DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  if (auto s = CheckReducible(input.scalar_type(), op); !s.ok()) return Work::Ready(s);
  return Run("reduce_scatter", [this, input, output, op]() -> absl::Status {
    if (layout_.hosts() == 1) return local_->ReduceScatter(input, output, op);
    at::Tensor whole = input.clone();
    TESSERA_RETURN_IF_ERROR(AllreduceNow(whole, op));
    output.view({-1}).copy_(whole.view({-1}).narrow(0, output.numel() * rank(), output.numel()));
    return absl::OkStatus();
  });
}

Work HierarchicalProcessGroup::DoSend(at::Tensor tensor, int dst, uint64_t tag) {
  return flat_->Send(std::move(tensor), dst, tag);
}

Work HierarchicalProcessGroup::DoRecv(at::Tensor tensor, int src, uint64_t tag) {
  return flat_->Recv(std::move(tensor), src, tag);
}

}  // namespace tessera::collectives
