// One trainer of the hybrid job: the dense classifier (Linear 64->128, ReLU,
// Linear 128->10) wrapped in DistributedDataParallel over the trainers'
// process group, and the parameter server's EmbeddingTable. A step, inside
// one distributed autograd context: remote lookup -> dense forward -> loss ->
// one distributed backward (the table's gradient goes to the server; DDP's
// reducer averages the dense gradients across trainers, in the context) ->
// one DistributedOptimizer step over the table and the dense parameters.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>

#include "ddp/distributed_data_parallel.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/hybrid_ddp_rpc/hybrid_model.h"
#include "rref/rref_context.h"

namespace tessera::examples {

class HybridTrainer {
 public:
  // `group` holds the trainers only (DDP's replicas); rank 0's dense
  // parameters are broadcast to the others. Throws StatusError.
  static std::unique_ptr<HybridTrainer> Create(rref::RRefContext& rrefs,
                                               dist_autograd::DistAutograd& autograd,
                                               collectives::ProcessGroup* group,
                                               rref::RRef<EmbeddingTable> table,
                                               const dist_optim::OptimizerOptions& options);

  // One training step on a batch; returns the loss. `inspect`, if given,
  // sees the context after backward and before the optimizer step.
  double Step(const at::Tensor& images, const at::Tensor& labels,
              const std::function<void(int64_t context_id)>& inspect = nullptr);
  // Accuracy (0..1) of the current model on a data set.
  double Accuracy(const at::Tensor& images, const at::Tensor& labels);

  torch::nn::Sequential& dense() { return dense_; }
  // The dense part's DDP wrapper (e.g. for a Join when trainers have
  // different numbers of batches).
  ddp::DistributedDataParallel& ddp() { return *ddp_; }
  rref::RRef<EmbeddingTable>& table() { return table_; }
  const dist_optim::DistributedOptimizer& optimizer() const { return *optimizer_; }

 private:
  HybridTrainer(dist_autograd::DistAutograd& autograd, rref::RRef<EmbeddingTable> table);

  dist_autograd::DistAutograd& autograd_;
  rref::RRef<EmbeddingTable> table_;
  torch::nn::Sequential dense_;
  std::unique_ptr<ddp::DistributedDataParallel> ddp_;
  std::optional<dist_optim::DistributedOptimizer> optimizer_;
};

}  // namespace tessera::examples
