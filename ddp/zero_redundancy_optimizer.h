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
// Overlap with DDP (PyTorch's overlap_with_ddp): with
// ZeroOptions::overlap_with_ddp, OverlapHook() is DDP's communication hook
// (set it in DdpOptions::comm_hook before creating DDP). When a gradient
// bucket's average is in, each rank steps the parameters of that bucket it
// owns, and each owner's updated parameters of the bucket are broadcast —
// during backward, while earlier layers' gradients are still being
// computed; Step() then has nothing left to do. Each owned parameter has an
// optimizer of its own (built by the factory over that one parameter), so
// a bucket's parameters step alone. Buckets' collectives are chained in
// bucket order so every rank issues them alike. Parameters are updated in
// place during backward: a parameter used twice in the graph (weights
// shared across layers) would fail autograd's in-place check, as in PyTorch.
//
// Thread-safety: none; call from the training loop's thread (the overlap
// hook runs on the process group's threads during backward).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "collectives/process_group.h"

namespace torch::optim {
class Optimizer;
}

namespace tessera::ddp {

class CommHook;

struct ZeroOptions {
  bool overlap_with_ddp = false;
  // Bound on each collective; zero: DefaultTimeout() (common/timeouts.h).
  absl::Duration timeout = absl::ZeroDuration();
};

using ShardOptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> shard)>;

class ZeroRedundancyOptimizer {
 public:
  // `parameters` in the same order on every rank (a module's parameters()).
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, collectives::ProcessGroup* group,
                          const ShardOptimizerFactory& make_optimizer, ZeroOptions options = {});
  ~ZeroRedundancyOptimizer();

  // Steps this rank's shard, then brings every rank's updated shard to all.
  // Throws StatusError naming the rank whose shard could not be shared.
  // With overlap_with_ddp: nothing (the hook did it during backward).
  void Step();
  // DDP's communication hook for overlap_with_ddp (null otherwise).
  std::shared_ptr<CommHook> OverlapHook() { return overlap_hook_; }
  // Clears the gradients of all parameters (not only the shard's).
  void ZeroGrad();

  // The rank that owns (steps, holds the state of) parameter `index`.
  int OwnerOf(size_t index) const { return owner_[index]; }
  // Indices of the parameters this rank owns, in parameter order.
  const std::vector<size_t>& shard() const { return shards_[group_->rank()]; }
  // The wrapped optimizer over this rank's shard (its state is this rank's);
  // with overlap_with_ddp, that of each owned parameter.
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  torch::optim::Optimizer& parameter_optimizer(size_t index) { return *per_parameter_.at(index); }
  // Bytes of optimizer state held here (LibTorch's serialization of it).
  int64_t StateBytes() const;

 private:
  class OverlapHookImpl;

  std::vector<at::Tensor> parameters_;
  collectives::ProcessGroup* const group_;
  const ZeroOptions options_;
  std::unordered_map<const c10::TensorImpl*, size_t> index_of_;
  std::vector<int> owner_;                          // per parameter
  std::vector<std::vector<size_t>> shards_;         // per rank, parameter indices
  std::unique_ptr<torch::optim::Optimizer> local_;  // without overlap
  // With overlap: per owned parameter index.
  std::map<size_t, std::unique_ptr<torch::optim::Optimizer>> per_parameter_;
  std::shared_ptr<CommHook> overlap_hook_;
};

// See Note [Sharded optimizer state]'s partition: per rank, the indices of the
// parameters with these element counts that it owns.
std::vector<std::vector<size_t>> PartitionBySize(const std::vector<int64_t>& numels, int ranks);

}  // namespace tessera::ddp
