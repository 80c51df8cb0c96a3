#include "ddp/zero_redundancy_optimizer.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "checkpoint/optimizer_state.h"
#include "common/status.h"

namespace tessera::ddp {

std::vector<std::vector<size_t>> PartitionBySize(const std::vector<int64_t>& numels, int ranks) {
  std::vector<size_t> by_size(numels.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> held(ranks, 0);
  std::vector<std::vector<size_t>> shards(ranks);
  for (size_t index : by_size) {
    const auto lightest = static_cast<size_t>(
        std::min_element(held.begin(), held.end()) - held.begin());  // first: lowest rank
    held[lightest] += numels[index];
    shards[lightest].push_back(index);
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters,
                                                 ProcessGroup* group,
                                                 const ShardOptimizerFactory& make_optimizer,
                                                 absl::Duration timeout)
    : parameters_(std::move(parameters)), group_(group), timeout_(timeout) {
  std::vector<int64_t> numels;
  for (const auto& p : parameters_) numels.push_back(p.numel());
  shards_ = PartitionBySize(numels, group_->size());
  owner_.assign(parameters_.size(), 0);
  for (int rank = 0; rank < group_->size(); ++rank) {
    for (size_t index : shards_[rank]) owner_[index] = rank;
  }
  std::vector<at::Tensor> mine;
  for (size_t index : shard()) mine.push_back(parameters_[index]);
  local_ = make_optimizer(std::move(mine));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::Step() {
  local_->step();
  at::NoGradGuard no_grad;
  // Issued in rank order on every rank, so the broadcasts match up.
  std::vector<at::Tensor> flats(group_->size());
  std::vector<Work> works;
  for (int rank = 0; rank < group_->size(); ++rank) {
    const auto& indices = shards_[rank];
    if (indices.empty()) {
      works.push_back(Work::Ready(std::monostate{}));
      continue;
    }
    std::vector<at::Tensor> pieces;
    for (size_t index : indices) pieces.push_back(parameters_[index].detach().reshape({-1}));
    flats[rank] = at::cat(pieces);
    works.push_back(group_->Broadcast(flats[rank], rank));
  }
  for (int rank = 0; rank < group_->size(); ++rank) {
    auto done = works[rank].Wait(timeout_);
    if (!done.ok()) {
      throw StatusError(Annotate(done.status(),
                                 absl::StrCat("ZeroRedundancyOptimizer: sharing the parameters "
                                              "stepped by rank ", rank)));
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
  return checkpoint::SaveOptimizerState(*local_).numel();
}

}  // namespace tessera::ddp
