// A model-parallel RNN trained with distributed autograd (PyTorch's RPC
// tutorial, part 2): the embedding table and the decoder live on the
// parameter server "ps", the LSTM on the trainer. Every forward crosses
// workers (embedding on ps -> LSTM here -> decoder on ps), backward follows
// it back through distributed autograd, and one DistributedOptimizer steps
// the parameters where they live.
//
// The task: sequences of a fixed permutation of 32 tokens (next = 5 t + 3
// mod 32) from random starts; the model learns to predict the next token.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 2
//       bazel-bin/examples/model_parallel_rnn/model_parallel_rnn
// (one command line.)
#include <ATen/TensorOperators.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randint.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/worker_example.h"
#include "pipeline/stage.h"
#include "rref/remote.h"

ABSL_FLAG(int64_t, steps, 300, "training steps");
ABSL_FLAG(int64_t, batch, 32, "sequences a step");
ABSL_FLAG(int64_t, log_every, 50, "steps between progress lines");

namespace tessera::examples {
namespace {

constexpr int64_t kVocabulary = 32, kEmbedding = 32, kHidden = 64, kLength = 16;

// The parts that live on the parameter server, as remote modules.
std::map<std::string, pipeline::StageFactory> ServerParts() {
  return {{"embedding",
           [](int64_t seed) {
             torch::manual_seed(seed);
             auto embedding = std::make_shared<torch::nn::EmbeddingImpl>(kVocabulary, kEmbedding);
             return pipeline::StageModel{
                 embedding->parameters(),
                 [embedding](const at::Tensor& tokens) { return embedding->forward(tokens); },
                 embedding};
           }},
          {"decoder", [](int64_t seed) {
             torch::manual_seed(seed);
             auto decoder = std::make_shared<torch::nn::LinearImpl>(kHidden, kVocabulary);
             return pipeline::StageModel{
                 decoder->parameters(),
                 [decoder](const at::Tensor& hidden) { return decoder->forward(hidden); }, decoder};
           }}};
}

// A batch of sequences and their next tokens.
std::pair<at::Tensor, at::Tensor> Batch(int64_t size) {
  at::Tensor tokens = at::empty({size, kLength + 1}, at::kLong);
  tokens.select(1, 0).copy_(at::randint(kVocabulary, {size}, at::kLong));
  for (int64_t t = 1; t <= kLength; ++t) {
    tokens.select(1, t).copy_((tokens.select(1, t - 1) * 5 + 3).remainder(kVocabulary));
  }
  return {tokens.narrow(1, 0, kLength), tokens.narrow(1, 1, kLength)};
}

int RunTrainer(Worker& worker) {
  auto embedding = worker.RemoteObject<pipeline::Stage>("ps", std::string("embedding"), int64_t{1});
  auto decoder = worker.RemoteObject<pipeline::Stage>("ps", std::string("decoder"), int64_t{2});
  torch::manual_seed(3);
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(kEmbedding, kHidden).batch_first(true));
  std::vector<rref::RRef<at::Tensor>> parameters =
      embedding.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs");
  for (const auto& p : lstm->parameters()) parameters.push_back(rref::MakeRRef(worker.rrefs(), p));
  for (const auto& p : decoder.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs")) {
    parameters.push_back(p);
  }
  dist_optim::AdamOptions adam;
  adam.lr = 1e-2;
  auto optimizer = dist_optim::DistributedOptimizer::Create(worker.rrefs(), parameters, adam);

  const auto start = std::chrono::steady_clock::now();
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  double first_loss = 0, loss_value = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    auto [inputs, targets] = Batch(absl::GetFlag(FLAGS_batch));
    dist_autograd::ContextGuard context(worker.autograd());
    at::Tensor embedded = embedding.RpcSync<at::Tensor>("apply", inputs);  // on ps
    at::Tensor hidden = std::get<0>(lstm->forward(embedded));              // here
    at::Tensor logits = decoder.RpcSync<at::Tensor>("apply", hidden);      // on ps
    at::Tensor loss =
        at::cross_entropy_loss(logits.reshape({-1, kVocabulary}), targets.reshape({-1}));
    worker.autograd().Backward(context.id(), {loss});
    optimizer.Step(context.id());
    loss_value = loss.item<double>();
    if (step == 1) first_loss = loss_value;
    if (step % absl::GetFlag(FLAGS_log_every) == 0) {
      std::printf("[trainer] step %lld/%lld: loss %.4f\n", static_cast<long long>(step),
                  static_cast<long long>(steps), loss_value);
    }
  }
  // Next-token accuracy on fresh sequences.
  auto [inputs, targets] = Batch(256);
  at::Tensor logits = decoder.RpcSync<at::Tensor>(
      "apply", std::get<0>(lstm->forward(embedding.RpcSync<at::Tensor>("apply", inputs))));
  const double accuracy = logits.argmax(-1).eq(targets).to(at::kFloat).mean().item<double>();
  std::printf("[trainer] loss %.4f -> %.4f in %lld steps, %.1f s; next-token accuracy %.1f%%\n",
              first_loss, loss_value, static_cast<long long>(steps),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              100 * accuracy);
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  return tessera::examples::RunWorkerExample(
      argc, argv,
      {"A model-parallel RNN (embedding and decoder on a parameter server, LSTM on the "
       "trainer) trained with distributed autograd; run it with tessera-run "
       "--nproc_per_node 2.",
       2, 2, "runs as 2 workers: --nproc_per_node 2",
       [](int rank) { return std::string(rank == 0 ? "trainer" : "ps"); },
       [](tessera::Worker& worker) {
         tessera::pipeline::RegisterStage(worker.rrefs().classes(),
                                          tessera::examples::ServerParts());
         return worker.rank() == 0 ? tessera::examples::RunTrainer(worker) : 0;
       }});
}
