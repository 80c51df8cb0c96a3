#include "examples/hybrid_ddp_rpc/hybrid_trainer.h"

#include <ATen/ops/argmax.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "common/status.h"
#include "rref/remote.h"

namespace tessera::examples {

HybridTrainer::HybridTrainer(dist_autograd::DistAutograd& autograd,
                             rref::RRef<EmbeddingTable> table)
    : autograd_(autograd),
      table_(std::move(table)),
      dense_(torch::nn::Linear(kEmbeddingDim, 128), torch::nn::ReLU(),
             torch::nn::Linear(128, 10)) {}

std::unique_ptr<HybridTrainer> HybridTrainer::Create(rref::RRefContext& rrefs,
                                                     dist_autograd::DistAutograd& autograd,
                                                     collectives::ProcessGroup* group,
                                                     rref::RRef<EmbeddingTable> table,
                                                     const dist_optim::OptimizerOptions& options) {
  std::unique_ptr<HybridTrainer> trainer(new HybridTrainer(autograd, std::move(table)));
  auto ddp = ddp::DistributedDataParallel::Create(trainer->dense_.ptr(), group);
  trainer->ddp_ = std::move(ddp);
  // The table's parameter lives on the server, the dense ones here.
  auto params = trainer->table_.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs");
  for (const auto& p : trainer->dense_->parameters()) params.push_back(rref::MakeRRef(rrefs, p));
  trainer->optimizer_.emplace(dist_optim::DistributedOptimizer::Create(rrefs, params, options));
  return trainer;
}

double HybridTrainer::Step(const at::Tensor& images, const at::Tensor& labels,
                           const std::function<void(int64_t)>& inspect) {
  dist_autograd::ContextGuard context(autograd_);
  at::Tensor embedded = table_.RpcSync<at::Tensor>("lookup", PatchWords(images));
  at::Tensor loss = at::cross_entropy_loss(dense_->forward(embedded), labels);
  autograd_.Backward(context.id(), {loss});
  if (inspect) inspect(context.id());
  optimizer_->Step(context.id());
  return loss.item<double>();
}

double HybridTrainer::Accuracy(const at::Tensor& images, const at::Tensor& labels) {
  int64_t correct = 0;
  const int64_t n = labels.size(0);
  for (int64_t start = 0; start < n; start += 1000) {
    const int64_t size = std::min<int64_t>(1000, n - start);
    at::Tensor embedded =
        table_.RpcSync<at::Tensor>("lookup", PatchWords(images.narrow(0, start, size)));
    at::Tensor predicted = at::argmax(dense_->forward(embedded.detach()), 1);
    correct += predicted.eq(labels.narrow(0, start, size)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / n;
}

}  // namespace tessera::examples
