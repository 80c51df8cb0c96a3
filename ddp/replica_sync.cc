#include "ddp/replica_sync.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "ddp/bucket_assignment.h"

namespace tessera::ddp {
namespace {

// Index of the first element of `values` that is not the same on every rank,
// or -1. One allreduce: the maximum of the values and of their negations
// gives each element's maximum and minimum across ranks.
absl::StatusOr<int64_t> FirstDifference(collectives::ProcessGroup* group,
                                        const std::vector<int64_t>& values,
                                        absl::Duration timeout) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (n == 0) return int64_t{-1};
  const at::Tensor mine = at::tensor(values);
  at::Tensor extremes = at::cat({mine, -mine});
  TESSERA_RETURN_IF_ERROR(
      group->Allreduce(extremes, collectives::ReduceOp::kMax).Wait(timeout).status());
  const int64_t* e = extremes.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (e[i] != -e[n + i]) return i;
  }
  return int64_t{-1};
}

std::string Describe(const at::Tensor& p) {
  return absl::StrCat(c10::toString(p.scalar_type()), " [", absl::StrJoin(p.sizes(), ", "), "]");
}

}  // namespace

// Three rounds, each comparing vectors of one length on all ranks (a vector
// of another length would be a mismatched collective): the count; then each
// parameter's dtype and number of dimensions; then all the sizes.
absl::Status CheckReplicasAgree(collectives::ProcessGroup* group,
                                const std::vector<std::string>& names,
                                const std::vector<at::Tensor>& parameters, absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(
      const int64_t count,
      FirstDifference(group, {static_cast<int64_t>(parameters.size())}, timeout));
  if (count >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedDataParallel: ranks hold different numbers of parameters (rank ",
                     group->rank(), ": ", parameters.size(), ")"));
  }
  std::vector<int64_t> kinds;
  std::vector<int64_t> sizes;
  std::vector<size_t> owner_of_size;  // sizes[i] belongs to parameter owner_of_size[i]
  for (size_t k = 0; k < parameters.size(); ++k) {
    kinds.push_back(static_cast<int64_t>(parameters[k].scalar_type()));
    kinds.push_back(parameters[k].dim());
    for (int64_t size : parameters[k].sizes()) {
      sizes.push_back(size);
      owner_of_size.push_back(k);
    }
  }
  auto differs = [&](size_t k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel: parameter '", names[k], "' is ", Describe(parameters[k]),
        " on rank ", group->rank(), " but not on every rank (replicas must be the same model)"));
  };
  TESSERA_ASSIGN_OR_RETURN(const int64_t kind, FirstDifference(group, kinds, timeout));
  if (kind >= 0) return differs(static_cast<size_t>(kind / 2));
  TESSERA_ASSIGN_OR_RETURN(const int64_t size, FirstDifference(group, sizes, timeout));
  if (size >= 0) return differs(owner_of_size[size]);
  return absl::OkStatus();
}

absl::Status BroadcastFrom(collectives::ProcessGroup* group, const std::vector<at::Tensor>& tensors,
                           int root, absl::Duration timeout) {
  constexpr size_t kCoalesceBytes = size_t{250} << 20;  // PyTorch DDP's choice
  std::vector<size_t> order(tensors.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  for (const auto& members : AssignBuckets(tensors, order, {kCoalesceBytes, kCoalesceBytes})) {
    std::vector<at::Tensor> pieces;
    for (size_t k : members) pieces.push_back(tensors[k].detach().reshape({-1}));
    at::Tensor flat = at::cat(pieces);
    TESSERA_RETURN_IF_ERROR(group->Broadcast(flat, root).Wait(timeout).status());
    if (group->rank() == root) continue;
    int64_t offset = 0;
    for (size_t k : members) {
      const at::Tensor& t = tensors[k];
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::ddp
