#include "ddp/distributed_sampler.h"
#include "common/status.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <stdexcept>

namespace tessera::ddp {

DistributedSampler::DistributedSampler(size_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (options_.num_replicas <= 0 || options_.rank < 0 ||
      options_.rank >= options_.num_replicas) {
    throw StatusError(absl::InvalidArgumentError(
        "DistributedSampler: rank " + std::to_string(options_.rank) + " is not in [0, " +
        std::to_string(options_.num_replicas) + ")"));
  }
  Recompute();
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  Recompute();
}

void DistributedSampler::Recompute() {
  std::vector<size_t> order(dataset_size_);
  if (options_.shuffle && dataset_size_ > 0) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed + epoch_);
    at::Tensor permutation = at::randperm(static_cast<int64_t>(dataset_size_), generator);
    const int64_t* p = permutation.data_ptr<int64_t>();
    for (size_t i = 0; i < dataset_size_; ++i) order[i] = static_cast<size_t>(p[i]);
  } else {
    for (size_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const size_t replicas = static_cast<size_t>(options_.num_replicas);
  size_t total;
  if (options_.drop_last) {
    total = dataset_size_ / replicas * replicas;
    order.resize(total);
  } else {
    total = (dataset_size_ + replicas - 1) / replicas * replicas;
    for (size_t i = 0; order.size() < total && dataset_size_ > 0; ++i) {
      order.push_back(order[i % dataset_size_]);
    }
  }
  indices_.clear();
  for (size_t i = static_cast<size_t>(options_.rank); i < order.size(); i += replicas) {
    indices_.push_back(order[i]);
  }
  position_ = 0;
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size.has_value()) dataset_size_ = *new_size;
  Recompute();
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (position_ >= indices_.size()) return torch::nullopt;
  const size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<size_t> batch(indices_.begin() + position_, indices_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(static_cast<int64_t>(epoch_)), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<int64_t>(position_)), /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch = torch::empty(1, torch::kInt64);
  torch::Tensor position = torch::empty(1, torch::kInt64);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  epoch_ = static_cast<uint64_t>(epoch.item<int64_t>());
  Recompute();
  position_ = static_cast<size_t>(position.item<int64_t>());
}

}  // namespace tessera::ddp
