#include "ddp/fault_tolerant/fault_tolerant_ddp.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <future>
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
void Await(const collectives::Work& work, absl::Duration timeout) {
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
  collectives::GlooOptions gloo = options_.gloo;
  // A fresh group per quorum: its keys must not meet an older group's.
  gloo.store_prefix = absl::StrCat(options_.quorum.prefix, "/group/", round.round);
  gloo.connect_timeout = options_.quorum.round_timeout();
  group_ = collectives::CreateGlooProcessGroup(store_, round.rank,
                                               static_cast<int>(round.members.size()), gloo);
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

void FaultTolerantDdp::AverageGradients(const QuorumRound& round, bool contribute) {
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> params = model_.parameters();
  for (auto& param : params) {
    grads.push_back(param.grad().defined() ? param.grad().reshape(-1)
                                           : at::zeros_like(param).reshape(-1));
  }
  at::Tensor flat = at::cat(grads);
  // Gradients computed on parameters the step no longer starts from count
  // for nothing (torchft's healing replica): the average is over the
  // members that were up to date, which every member counts alike.
  if (!contribute) flat.zero_();
  int64_t contributors = 0;
  for (const auto& m : round.members) contributors += m.step == round.max_step() ? 1 : 0;
  Await(group_->Allreduce(flat, collectives::ReduceOp::kSum), options_.gloo.timeout);
  flat.div_(static_cast<double>(contributors));
  int64_t offset = 0;
  for (auto& param : params) {
    const int64_t n = param.numel();
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    param.grad().copy_(flat.slice(0, offset, offset + n).view_as(param));
    offset += n;
  }
}

FaultTolerantStep FaultTolerantDdp::Step(const std::function<double()>& forward_backward) {
  // The quorum is agreed while forward and backward run (torchft's
  // asynchronous quorum): the step waits only for what is left of it.
  std::future<absl::StatusOr<QuorumRound>> joining =
      std::async(std::launch::async, [this, step = step_] { return quorum_.Join(step); });
  FaultTolerantStep result;
  bool ok = true;
  optimizer_.zero_grad();
  try {
    result.loss = forward_backward();
  } catch (const std::exception& e) {
    TESSERA_LOG(WARNING) << options_.replica_id << ": step " << step_ << " failed: " << e.what();
    ok = false;
  }
  const absl::Time waiting = absl::Now();
  const QuorumRound round = ValueOrThrow(joining.get());
  result.coordination = absl::Now() - waiting;
  result.replicas = static_cast<int>(round.members.size());
  try {
    const bool current = step_ == round.max_step();
    bool behind = false;
    for (const auto& m : round.members) behind = behind || m.step != round.max_step();
    // Every member must make the same choice, from the round alone: members
    // of one round may commit differently (see Note [No split brain]), and then
    // some are behind; when none is, all or none of them broke their group.
    if (round.changed || group_ == nullptr || group_broken_ || behind) FormGroup(round);
    if (behind) {
      result.recovered = !current;
      Recover(round);
    }
    // A replica whose own part failed stays out of the average: the others'
    // collective fails too, and nobody commits.
    if (ok) AverageGradients(round, current);
  } catch (const std::exception& e) {
    // A member died mid-step (or while the group formed): this step is
    // dropped by those whose collective failed; the next quorum leaves the
    // dead one out.
    TESSERA_LOG(WARNING) << options_.replica_id << ": step " << step_ << " of round " << round.round
                         << " failed: " << e.what();
    ok = false;
  }
  result.step = step_;
  const absl::Time committing = absl::Now();
  result.committed = ValueOrThrow(quorum_.Commit(round, ok));
  result.coordination += absl::Now() - committing;
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
