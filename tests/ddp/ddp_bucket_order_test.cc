// See Note [Bucket rebuild]: after the first pass, buckets follow the order in
// which gradients really became ready — rank 0's order, on every rank.
// Rank 0 is this process, rank 1 a child.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

constexpr int kSteps = 3;

// Three equal layers registered a, b, c. Forward runs them c, b, a — so
// backward makes a's gradients first, the opposite of the registration
// guess — or, with `registered_order`, a, b, c.
struct ShuffledImpl : torch::nn::Module {
  explicit ShuffledImpl(int64_t seed) {
    torch::manual_seed(seed);
    a = register_module("a", torch::nn::Linear(10, 10));
    b = register_module("b", torch::nn::Linear(10, 10));
    c = register_module("c", torch::nn::Linear(10, 10));
  }
  torch::Tensor forward(torch::Tensor x, bool registered_order) {
    if (registered_order) return c->forward(torch::relu(b->forward(torch::relu(a->forward(x)))));
    return a->forward(torch::relu(b->forward(torch::relu(c->forward(x)))));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

// Each layer in a bucket of its own. Rank 0 runs forward c, b, a; rank 1
// a, b, c. First pass, registration guess (buckets c, b, a): rank 0 gets c's
// gradients last, so it launches everything at the end; rank 1's backward
// matches the guess, so it launches two of three while backward still runs.
// From the second pass on, both use rank 0's order (buckets a, b, c): rank 0
// launches two early, rank 1 none — it does not use its own order, which is
// the point: the averages still match one process computing both ranks'
// losses (equal-sized layers: ranks on different bucket orders would pair
// different layers without any error).
absl::Status RunShuffled(collectives::ProcessGroup& group) {
  const int r = group.rank();
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({8, 10});
  const torch::Tensor y = torch::randn({8, 10});
  auto replica = std::make_shared<ShuffledImpl>(/*seed=*/60 + r);
  auto reference = std::make_shared<ShuffledImpl>(/*seed=*/60);
  ddp::DdpOptions options;
  options.bucket_cap_mb = 0.0002;  // ~200 bytes: {bias, weight} of one layer
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group, options);
  torch::optim::SGD opt(replica->parameters(), 0.1);
  torch::optim::SGD ref_opt(reference->parameters(), 0.1);
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    torch::mse_loss(replica->forward(x.narrow(0, 4 * r, 4), r == 1), y.narrow(0, 4 * r, 4))
        .backward();
    opt.step();
    ref_opt.zero_grad();
    ((torch::mse_loss(reference->forward(x.narrow(0, 0, 4), false), y.narrow(0, 0, 4)) +
      torch::mse_loss(reference->forward(x.narrow(0, 4, 4), true), y.narrow(0, 4, 4))) /
     2)
        .backward();
    ref_opt.step();
    const ddp::ReducerPassStats stats = ddp->last_pass();
    const size_t expected = (step == 0) == (r == 1) ? 2 : 0;
    if (stats.buckets != 3 || stats.launched_before_last_gradient != expected) {
      return absl::InternalError(absl::StrCat(
          "step ", step, ": ", stats.launched_before_last_gradient, " of ", stats.buckets,
          " buckets sent before the last gradient; expected ", expected, " of 3"));
    }
  }
  auto mine = replica->parameters();
  auto whole = reference->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!torch::allclose(mine[i], whole[i], 1e-5, 1e-6)) {
      return absl::InternalError(absl::StrCat("parameter ", i, " differs from one process's by ",
                                              (mine[i] - whole[i]).abs().max().item<float>()));
    }
  }
  return absl::OkStatus();
}

TESSERA_TWO_RANK_TEST(TwoRankGlooTest, BucketsFollowRankZerosGradientOrderAfterTheFirstPass,
                      RunShuffled)

}  // namespace
}  // namespace tessera::testing
