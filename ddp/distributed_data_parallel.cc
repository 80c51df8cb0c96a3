#include "ddp/distributed_data_parallel.h"

#include "common/status.h"
#include "ddp/replica_sync.h"

namespace tessera::ddp {

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
  TESSERA_RETURN_IF_ERROR(CheckReplicasAgree(group, names, parameters, options.timeout));
  // Rank 0's initial state everywhere.
  TESSERA_RETURN_IF_ERROR(BroadcastFromRankZero(group, parameters, options.timeout));
  TESSERA_RETURN_IF_ERROR(ddp->SyncBuffers());
  ReducerOptions reducer;
  reducer.limits.first_cap_bytes = static_cast<size_t>(options.first_bucket_cap_mb * (1 << 20));
  reducer.limits.cap_bytes = static_cast<size_t>(options.bucket_cap_mb * (1 << 20));
  reducer.timeout = options.timeout;
  reducer.comm_hook = options.comm_hook;
  reducer.find_unused_parameters = options.find_unused_parameters;
  reducer.gradient_as_bucket_view = options.gradient_as_bucket_view;
  ddp->reducer_ = std::make_unique<Reducer>(parameters, group, reducer);
  return ddp;
}

absl::Status DistributedDataParallel::SyncBuffers() {
  std::vector<at::Tensor> buffers;
  for (auto& buffer : module_->buffers()) {
    if (buffer.defined()) buffers.push_back(buffer);
  }
  return BroadcastFromRankZero(group_, buffers, options_.timeout);
}

}  // namespace tessera::ddp
