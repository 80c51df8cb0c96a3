#include "ddp/fault_tolerant/fault_tolerant_ddp.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/optimizer_state.h"
#include "common/await_call.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timeouts.h"

namespace tessera::ddp {
namespace {

// Waits for a collective (which fails by itself at `timeout`), throwing its
// error.
void Await(const Work& work, absl::Duration timeout) {
  ThrowIfError(AwaitCall(work, timeout).status());
}

FaultTolerantOptions WithDefaultGlooTimeout(FaultTolerantOptions options) {
  options.gloo = WithDefaultTimeout(std::move(options.gloo));
  return options;
}

}  // namespace

FaultTolerantDdp::FaultTolerantDdp(store::StoreClient* store, torch::nn::Module& model,
                                   torch::optim::Optimizer& optimizer, FaultTolerantOptions options)
    : store_(store),
      model_(model),
      optimizer_(optimizer),
      options_(WithDefaultGlooTimeout(std::move(options))),
      quorum_(store, options_.replica_id, options_.quorum) {}

FaultTolerantDdp::~FaultTolerantDdp() = default;

void FaultTolerantDdp::FormGroup(const QuorumRound& round) {
  group_.reset();
  GlooOptions gloo = options_.gloo;
  // A fresh group per quorum: its keys must not meet an older group's.
  gloo.store_prefix = absl::StrCat(options_.quorum.prefix, "/group/", round.round);
  gloo.connect_timeout = options_.quorum.round_timeout();
  group_ = CreateGlooProcessGroup(store_, round.rank, static_cast<int>(round.members.size()), gloo);
  group_broken_ = false;
}

void FaultTolerantDdp::Recover(const QuorumRound& round) {
  int source = 0;
  while (round.members[source].step != round.max_step()) ++source;
  const absl::Duration timeout = options_.gloo.timeout;
  torch::NoGradGuard no_grad;
  for (auto& param : model_.parameters()) Await(group_->Broadcast(param.data(), source), timeout);
  for (auto& buffer : model_.buffers()) Await(group_->Broadcast(buffer.data(), source), timeout);
  // The optimizer state travels as bytes: its length first.
  at::Tensor state =
      round.rank == source ? checkpoint::SaveOptimizerState(optimizer_) : at::Tensor();
  at::Tensor length = at::empty({1}, at::kLong);
  length.fill_(state.defined() ? state.numel() : 0);
  Await(group_->Broadcast(length, source), timeout);
  if (round.rank != source) state = at::empty({length.item<int64_t>()}, at::kByte);
  Await(group_->Broadcast(state, source), timeout);
  if (round.rank != source) {
    checkpoint::LoadOptimizerState(optimizer_, state);
    TESSERA_LOG(INFO) << options_.replica_id << ": recovered step " << round.max_step() << " from '"
                      << round.members[source].id << "'";
  }
  step_ = round.max_step();
}

void FaultTolerantDdp::AverageGradients() {
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> params = model_.parameters();
  for (auto& param : params) {
    grads.push_back(param.grad().defined() ? param.grad().reshape(-1)
                                           : at::zeros_like(param).reshape(-1));
  }
  at::Tensor flat = at::cat(grads);
  Await(group_->Allreduce(flat, ReduceOp::kAverage), options_.gloo.timeout);
  int64_t offset = 0;
  for (auto& param : params) {
    const int64_t n = param.numel();
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    param.grad().copy_(flat.slice(0, offset, offset + n).view_as(param));
    offset += n;
  }
}

FaultTolerantStep FaultTolerantDdp::Step(const std::function<double()>& forward_backward) {
  const absl::Time joining = absl::Now();
  const QuorumRound round = ValueOrThrow(quorum_.Join(step_));
  FaultTolerantStep result;
  result.coordination = absl::Now() - joining;
  result.replicas = static_cast<int>(round.members.size());
  bool ok = true;
  try {
    if (round.changed || group_ == nullptr || group_broken_) FormGroup(round);
    bool behind = false;
    for (const auto& m : round.members) behind = behind || m.step != round.max_step();
    if (behind) {
      result.recovered = step_ != round.max_step();
      Recover(round);
    }
    optimizer_.zero_grad();
    result.loss = forward_backward();
    AverageGradients();
  } catch (const std::exception& e) {
    // A member died mid-step (or while the group formed): this step is
    // dropped everywhere; the next quorum leaves the dead one out.
    TESSERA_LOG(WARNING) << options_.replica_id << ": step " << step_ << " of round " << round.round
                         << " failed: " << e.what();
    ok = false;
  }
  const absl::Time voting = absl::Now();
  result.committed = ValueOrThrow(quorum_.Commit(round, ok));
  result.coordination += absl::Now() - voting;
  if (result.committed) {
    optimizer_.step();
    ++step_;
  } else {
    optimizer_.zero_grad();
    group_broken_ = true;
  }
  return result;
}

}  // namespace tessera::ddp
