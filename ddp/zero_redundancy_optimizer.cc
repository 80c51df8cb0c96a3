#include "ddp/zero_redundancy_optimizer.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "checkpoint/optimizer_state.h"
#include "common/status.h"
#include "common/timeouts.h"
#include "ddp/comm_hook.h"

namespace tessera::ddp {

std::vector<std::vector<size_t>> PartitionBySize(const std::vector<int64_t>& numels, int ranks) {
  std::vector<size_t> by_size(numels.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> held(ranks, 0);
  std::vector<std::vector<size_t>> shards(ranks);
  for (size_t index : by_size) {
    const auto lightest = static_cast<size_t>(std::min_element(held.begin(), held.end()) -
                                              held.begin());  // first: lowest rank
    held[lightest] += numels[index];
    shards[lightest].push_back(index);
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

// Steps a bucket's owned parameters once its average is in, then shares
// each owner's updated parameters of the bucket (see Note [Sharded optimizer
// state], overlap with DDP).
class ZeroRedundancyOptimizer::OverlapHookImpl final : public CommHook {
 public:
  explicit OverlapHookImpl(ZeroRedundancyOptimizer* zero)
      : zero_(zero), tail_(collectives::Work::Ready(std::monostate{})) {}

  collectives::Work Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) override {
    tail_ = tail_.Then(
        [this, bucket, &group](const absl::StatusOr<std::monostate>& before) -> collectives::Work {
          if (!before.ok()) return collectives::Work::Ready(before.status());
          return group.Allreduce(bucket.flat, collectives::ReduceOp::kAverage)
              .Then([this, bucket,
                     &group](const absl::StatusOr<std::monostate>& averaged) -> collectives::Work {
                if (!averaged.ok()) return collectives::Work::Ready(averaged.status());
                return StepAndShare(bucket, group);
              });
        });
    return tail_;
  }
  std::string name() const override { return "zero_overlap"; }

 private:
  collectives::Work StepAndShare(const GradBucket& bucket, collectives::ProcessGroup& group) {
    std::vector<std::vector<size_t>> by_owner(group.size());  // positions in the bucket
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      by_owner[zero_->owner_[IndexOf(bucket.parameters[i])]].push_back(i);
    }
    for (size_t i : by_owner[group.rank()]) {
      at::Tensor p = bucket.parameters[i];
      p.mutable_grad() = bucket.gradients[i].clone();
      zero_->per_parameter_.at(IndexOf(p))->step();
    }
    std::vector<collectives::Work> shared;
    for (int rank = 0; rank < group.size(); ++rank) {
      if (by_owner[rank].empty()) continue;
      std::vector<at::Tensor> pieces;
      for (size_t i : by_owner[rank]) pieces.push_back(bucket.parameters[i].detach().reshape({-1}));
      at::Tensor flat = at::cat(pieces);
      shared.push_back(
          group.Broadcast(flat, rank)
              .Then([bucket, positions = by_owner[rank], flat,
                     mine = rank == group.rank()](const absl::StatusOr<std::monostate>& done)
                        -> absl::StatusOr<std::monostate> {
                if (!done.ok() || mine) return done;
                at::NoGradGuard no_grad;
                int64_t offset = 0;
                for (size_t i : positions) {
                  const at::Tensor& p = bucket.parameters[i];
                  p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
                  offset += p.numel();
                }
                return done;
              }));
    }
    return WhenAllOk(shared).Then(
        [](const absl::StatusOr<bool>& all) -> absl::StatusOr<std::monostate> {
          if (!all.ok()) return all.status();
          return std::monostate{};
        });
  }

  size_t IndexOf(const at::Tensor& p) const {
    auto it = zero_->index_of_.find(p.unsafeGetTensorImpl());
    if (it == zero_->index_of_.end()) {
      throw StatusError(absl::InvalidArgumentError(
          "ZeroRedundancyOptimizer: DDP's parameter is not one of ours"));
    }
    return it->second;
  }

  ZeroRedundancyOptimizer* const zero_;
  collectives::Work tail_;
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters,
                                                 collectives::ProcessGroup* group,
                                                 const ShardOptimizerFactory& make_optimizer,
                                                 ZeroOptions options)
    : parameters_(std::move(parameters)), group_(group), options_(WithDefaultTimeout(options)) {
  std::vector<int64_t> numels;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    numels.push_back(parameters_[i].numel());
    index_of_[parameters_[i].unsafeGetTensorImpl()] = i;
  }
  shards_ = PartitionBySize(numels, group_->size());
  owner_.assign(parameters_.size(), 0);
  for (int rank = 0; rank < group_->size(); ++rank) {
    for (size_t index : shards_[rank]) owner_[index] = rank;
  }
  if (options_.overlap_with_ddp) {
    for (size_t index : shard()) per_parameter_[index] = make_optimizer({parameters_[index]});
    overlap_hook_ = std::make_shared<OverlapHookImpl>(this);
    return;
  }
  std::vector<at::Tensor> mine;
  for (size_t index : shard()) mine.push_back(parameters_[index]);
  local_ = make_optimizer(std::move(mine));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::Step() {
  if (options_.overlap_with_ddp) return;  // done by the hook during backward
  local_->step();
  at::NoGradGuard no_grad;
  // Issued in rank order on every rank, so the broadcasts match up.
  std::vector<at::Tensor> flats(group_->size());
  std::vector<collectives::Work> works;
  for (int rank = 0; rank < group_->size(); ++rank) {
    const auto& indices = shards_[rank];
    if (indices.empty()) {
      works.push_back(collectives::Work::Ready(std::monostate{}));
      continue;
    }
    std::vector<at::Tensor> pieces;
    for (size_t index : indices) pieces.push_back(parameters_[index].detach().reshape({-1}));
    flats[rank] = at::cat(pieces);
    works.push_back(group_->Broadcast(flats[rank], rank));
  }
  for (int rank = 0; rank < group_->size(); ++rank) {
    auto done = works[rank].Wait(options_.timeout);
    if (!done.ok()) {
      throw StatusError(
          Annotate(done.status(), absl::StrCat("ZeroRedundancyOptimizer: sharing the parameters "
                                               "stepped by rank ",
                                               rank)));
    }
    if (rank == group_->rank()) continue;  // already in place
    int64_t offset = 0;
    for (size_t index : shards_[rank]) {
      at::Tensor& p = parameters_[index];
      p.detach().copy_(flats[rank].narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::ZeroGrad() {
  for (auto& p : parameters_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

int64_t ZeroRedundancyOptimizer::StateBytes() const {
  if (local_ != nullptr) return checkpoint::SaveOptimizerState(*local_).numel();
  int64_t bytes = 0;
  for (const auto& [index, optimizer] : per_parameter_) {
    bytes += checkpoint::SaveOptimizerState(*optimizer).numel();
  }
  return bytes;
}

}  // namespace tessera::ddp
