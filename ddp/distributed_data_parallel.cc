#include "ddp/distributed_data_parallel.h"

#include <ATen/ops/tensor.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::ddp {
namespace {

absl::Status Await(Work work, absl::Duration timeout) {
  auto result = work.Wait(timeout);
  return result.ok() ? absl::OkStatus() : result.status();
}

// Fails unless every rank has the same value of `values` (elementwise);
// returns the index of the first difference.
absl::StatusOr<int64_t> FirstDifference(ProcessGroup* group, const at::Tensor& values,
                                        absl::Duration timeout) {
  at::Tensor low = values.clone();
  at::Tensor high = values.clone();
  TESSERA_RETURN_IF_ERROR(Await(group->Allreduce(low, ReduceOp::kMin), timeout));
  TESSERA_RETURN_IF_ERROR(Await(group->Allreduce(high, ReduceOp::kMax), timeout));
  const int64_t* lo = low.data_ptr<int64_t>();
  const int64_t* hi = high.data_ptr<int64_t>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (lo[i] != hi[i]) return i;
  }
  return int64_t{-1};
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 ProcessGroup* group, DdpOptions options)
    : module_(std::move(module)), group_(group), options_(options) {}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<torch::nn::Module> module, ProcessGroup* group, DdpOptions options) {
  std::unique_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(module), group, options));
  auto named = ddp->module_->named_parameters();
  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& item : named) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  // Same number of parameters, then the same shapes, on every rank.
  auto count = FirstDifference(group, at::tensor({static_cast<int64_t>(parameters.size())}),
                               options.timeout);
  if (!count.ok()) return count.status();
  if (*count >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel: ranks hold different numbers of parameters (this rank: ",
        parameters.size(), ")"));
  }
  std::vector<int64_t> numels;
  for (const auto& p : parameters) numels.push_back(p.numel());
  if (!numels.empty()) {
    auto first = FirstDifference(group, at::tensor(numels), options.timeout);
    if (!first.ok()) return first.status();
    if (*first >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DistributedDataParallel: parameter '", names[*first], "' has ", numels[*first],
          " elements on rank ", group->rank(), " but not on every rank"));
    }
  }
  // Rank 0's initial state everywhere.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : parameters) {
      TESSERA_RETURN_IF_ERROR(Await(group->Broadcast(p.detach(), 0), options.timeout));
    }
  }
  TESSERA_RETURN_IF_ERROR(ddp->SyncBuffers());
  ReducerOptions reducer;
  reducer.bucket_cap_bytes = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  reducer.timeout = options.timeout;
  reducer.comm_hook = options.comm_hook;
  reducer.find_unused_parameters = options.find_unused_parameters;
  reducer.gradient_as_bucket_view = options.gradient_as_bucket_view;
  ddp->reducer_ = std::make_unique<Reducer>(parameters, group, reducer);
  return ddp;
}

absl::Status DistributedDataParallel::SyncBuffers() {
  torch::NoGradGuard no_grad;
  for (auto& buffer : module_->buffers()) {
    if (!buffer.defined()) continue;
    TESSERA_RETURN_IF_ERROR(Await(group_->Broadcast(buffer, 0), options_.timeout));
  }
  return absl::OkStatus();
}

}  // namespace tessera::ddp
