// DistributedSampler: which examples of a dataset each rank reads, with the
// semantics of torch.utils.data.distributed.DistributedSampler:
// - every epoch, one permutation of 0..size-1 (seeded by seed + epoch, so all
//   ranks compute the same one; or 0..size-1 in order without shuffle);
// - padded by repeating its start to a multiple of num_replicas, so every
//   rank runs the same number of steps — or truncated with drop_last;
// - rank r takes positions r, r + num_replicas, r + 2 num_replicas, …, so
//   the shards are disjoint (but for the padding).
// Call set_epoch() before each epoch for a new shuffle. Works as a LibTorch
// sampler with torch::data::make_data_loader.
#pragma once

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::ddp {

struct DistributedSamplerOptions {
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler final : public torch::data::samplers::Sampler<> {
 public:
  DistributedSampler(size_t dataset_size, DistributedSamplerOptions options);

  void set_epoch(uint64_t epoch);
  // The indices this rank reads in the current epoch, in order.
  const std::vector<size_t>& indices() const { return indices_; }
  // Examples per rank per epoch (the same on every rank).
  size_t num_samples() const { return indices_.size(); }

  // torch::data::samplers::Sampler<>
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void Recompute();

  size_t dataset_size_;
  const DistributedSamplerOptions options_;
  uint64_t epoch_ = 0;
  std::vector<size_t> indices_;
  size_t position_ = 0;
};

}  // namespace tessera::ddp
