#include "ddp/distributed_data_parallel.h"

#include <exception>
#include <stdexcept>

#include "common/logging.h"
#include "common/status.h"
#include "common/timeouts.h"
#include "ddp/replica_sync.h"

namespace tessera::ddp {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 collectives::ProcessGroup* group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(group), options_(options) {}

std::unique_ptr<DistributedDataParallel> DistributedDataParallel::Create(
    std::shared_ptr<torch::nn::Module> module, collectives::ProcessGroup* group,
    DdpOptions options) {
  options = WithDefaultTimeout(std::move(options));
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
  ThrowIfError(CheckReplicasAgree(group, names, parameters, options.timeout));
  // Rank 0's initial state everywhere.
  ThrowIfError(BroadcastFrom(group, parameters, /*root=*/0, options.timeout));
  ddp->SyncBuffers();
  ReducerOptions reducer;
  reducer.limits.first_cap_bytes = static_cast<size_t>(options.first_bucket_cap_mb * (1 << 20));
  reducer.limits.cap_bytes = static_cast<size_t>(options.bucket_cap_mb * (1 << 20));
  reducer.timeout = options.timeout;
  reducer.comm_hook = options.comm_hook;
  reducer.find_unused_parameters = options.find_unused_parameters;
  reducer.gradient_as_bucket_view = options.gradient_as_bucket_view;
  ddp->reducer_ = std::make_unique<Reducer>(std::move(parameters), group, reducer);
  return ddp;
}

std::vector<at::Tensor> DistributedDataParallel::Buffers() {
  std::vector<at::Tensor> buffers;
  for (auto& buffer : module_->buffers()) {
    if (buffer.defined()) buffers.push_back(buffer);
  }
  return buffers;
}

void DistributedDataParallel::SyncBuffers() {
  int root = 0;
  if (join_ != nullptr) {
    ThrowIfError(join_->Stopped());
    JoinAnnouncement announcement(group_, JoinStep::kSyncBuffers);
    ThrowIfError(join_->Settle(announcement, options_.timeout).status());
    root = join_->Authority();
  }
  ThrowIfError(BroadcastFrom(group_, Buffers(), root, options_.timeout));
}

DistributedDataParallel::JoinGuard DistributedDataParallel::Join(JoinOptions options) {
  if (join_ != nullptr) {
    throw StatusError(absl::FailedPreconditionError(
        "DistributedDataParallel::Join: already inside a Join (one at a time)"));
  }
  join_ = std::make_shared<JoinTracker>(group_->rank(), group_->size(), options);
  reducer_->set_join(join_);
  return JoinGuard(this);
}

// See Note [Joining with uneven inputs].
absl::Status DistributedDataParallel::ShadowUntilAllJoined() {
  TESSERA_RETURN_IF_ERROR(join_->Stopped());
  while (true) {
    JoinAnnouncement announcement(group_, /*step=*/std::nullopt);
    TESSERA_ASSIGN_OR_RETURN(const JoinRound round, join_->Settle(announcement, options_.timeout));
    if (!round.step.has_value()) break;
    if (*round.step == JoinStep::kBackward) {
      TESSERA_RETURN_IF_ERROR(reducer_->ShadowPass());
    } else {
      TESSERA_RETURN_IF_ERROR(
          BroadcastFrom(group_, Buffers(), join_->Authority(), options_.timeout));
    }
  }
  std::vector<at::Tensor> model = reducer_->parameters();
  for (auto& buffer : Buffers()) model.push_back(buffer);
  return BroadcastFrom(group_, model, join_->Authority(), options_.timeout);
}

void DistributedDataParallel::LeaveJoin() {
  reducer_->set_join(nullptr);
  join_ = nullptr;
}

DistributedDataParallel::JoinGuard::JoinGuard(DistributedDataParallel* ddp)
    : ddp_(ddp), exceptions_at_entry_(std::uncaught_exceptions()) {}

void DistributedDataParallel::JoinGuard::Finish() { ThrowIfError(TryFinish()); }

absl::Status DistributedDataParallel::JoinGuard::TryFinish() {
  if (finished_) {
    return absl::FailedPreconditionError("DistributedDataParallel::Join: Finish() called twice");
  }
  finished_ = true;
  const absl::Status status = ddp_->ShadowUntilAllJoined();
  ddp_->LeaveJoin();
  return status;
}

DistributedDataParallel::JoinGuard::~JoinGuard() {
  if (finished_) return;
  if (std::uncaught_exceptions() > exceptions_at_entry_) {
    ddp_->LeaveJoin();
    return;
  }
  const absl::Status status = TryFinish();
  if (!status.ok()) {
    TESSERA_LOG(ERROR) << status;
  }
}

}  // namespace tessera::ddp
