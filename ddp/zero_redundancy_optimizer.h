// ZeroRedundancyOptimizer: an optimizer whose state is sharded across the
// ranks of a data-parallel group (ZeRO stage 1; PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer).
//
//   auto ddp = DistributedDataParallel::Create(model, group.get(), {});
//   ddp::ZeroRedundancyOptimizer zero(model->parameters(), group.get(),
//       [](std::vector<at::Tensor> shard) {
//         return std::make_unique<torch::optim::Adam>(shard, torch::optim::AdamOptions(1e-3));
//       });
//   for (...) {
//     zero.ZeroGrad();
//     loss_fn(model->forward(x), y).backward();   // DDP averages every gradient
//     zero.Step();
//   }
//
// Note [Sharded optimizer state]
// Every rank computes the same partition of the parameters: largest first,
// each to the rank holding the fewest elements so far (ties to the lower
// rank), so shards are balanced by size and agree without communication.
// Each rank builds the wrapped optimizer over its shard only, so Adam's two
// moments exist for about 1/world of the model per rank. Step() steps the
// shard (every rank holds every averaged gradient, from DDP), then each
// rank's updated shard is broadcast from it as one flat buffer — `world`
// broadcasts per step, together the size of the model, as DDP's allreduce
// moves about twice that. Every rank ends the step with the same
// parameters as a plain optimizer stepping all of them would give.
//
// Thread-safety: none; call from the training loop's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/timeouts.h"
#include "ddp/process_group.h"

namespace torch::optim {
class Optimizer;
}

namespace tessera::ddp {

using ShardOptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> shard)>;

class ZeroRedundancyOptimizer {
 public:
  // `parameters` in the same order on every rank (a module's parameters()).
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, ProcessGroup* group,
                          const ShardOptimizerFactory& make_optimizer,
                          absl::Duration timeout = DefaultTimeout());
  ~ZeroRedundancyOptimizer();

  // Steps this rank's shard, then brings every rank's updated shard to all.
  // Throws StatusError naming the rank whose shard could not be shared.
  void Step();
  // Clears the gradients of all parameters (not only the shard's).
  void ZeroGrad();

  // The rank that owns (steps, holds the state of) parameter `index`.
  int OwnerOf(size_t index) const { return owner_[index]; }
  // Indices of the parameters this rank owns, in parameter order.
  const std::vector<size_t>& shard() const { return shards_[group_->rank()]; }
  // The wrapped optimizer over this rank's shard (its state is this rank's).
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  // Bytes of optimizer state held here (LibTorch's serialization of it).
  int64_t StateBytes() const;

 private:
  std::vector<at::Tensor> parameters_;
  ProcessGroup* const group_;
  const absl::Duration timeout_;
  std::vector<int> owner_;                   // per parameter
  std::vector<std::vector<size_t>> shards_;  // per rank, parameter indices
  std::unique_ptr<torch::optim::Optimizer> local_;
};

// Note [Sharded optimizer state]'s partition: per rank, the indices of the
// parameters with these element counts that it owns.
std::vector<std::vector<size_t>> PartitionBySize(const std::vector<int64_t>& numels, int ranks);

}  // namespace tessera::ddp
