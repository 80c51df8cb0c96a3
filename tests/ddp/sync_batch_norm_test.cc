// SyncBatchNorm: two ranks, each with a shard of one batch, must compute
// what one BatchNorm computes on the whole batch — outputs, gradients,
// running statistics — also when the shards differ in size, and train like
// it under DDP. Rank 0 is this process, rank 1 a child; each checks its own
// side against its own single-process reference.
#include "ddp/sync_batch_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

absl::Status Close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what,
                   double rtol = 1e-4, double atol = 1e-5) {
  if (got.sizes() == want.sizes() &&
      torch::allclose(got.to(want.scalar_type()), want, rtol, atol)) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(
      what, " differs from one BatchNorm on the whole batch",
      got.sizes() == want.sizes() ? absl::StrCat(" by ", (got - want).abs().max().item<double>())
                                  : " in shape"));
}

// Shards of 3 and 5 rows, for inputs (8, 3, 4, 4) and (8, 3); eval mode
// afterwards uses the running statistics and communicates nothing (rank 0
// runs it twice, rank 1 not at all, and the group is still in step).
absl::Status RunShards(collectives::ProcessGroup& group) {
  const int r = group.rank();
  const torch::Tensor rows = r == 0 ? torch::arange(0, 3) : torch::arange(3, 8);
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{8, 3, 4, 4}, {8, 3}}) {
    const std::string what = absl::StrCat("input of ", shape.size(), " dimensions: ");
    torch::manual_seed(11);
    const torch::Tensor x = torch::randn(shape) * 3 + 1;
    const torch::Tensor g = torch::randn(shape);
    const torch::Tensor gamma = torch::rand({3}) + 0.5;
    const torch::Tensor beta = torch::randn({3});

    ddp::SyncBatchNormOptions options(3);
    options.timeout = absl::Seconds(20);
    ddp::SyncBatchNorm sync(options, &group);
    torch::nn::BatchNorm1d reference(3);  // 1d accepts (N, C) and (N, C, L); we flatten 4-d
    {
      torch::NoGradGuard no_grad;
      for (auto* p : {&sync->weight, &reference->weight}) p->copy_(gamma);
      for (auto* p : {&sync->bias, &reference->bias}) p->copy_(beta);
    }
    const torch::Tensor mine = x.index_select(0, rows).requires_grad_();
    const torch::Tensor out = sync(mine);
    (out * g.index_select(0, rows)).sum().backward();

    const torch::Tensor whole = x.clone().requires_grad_();
    auto as_1d = [&](const torch::Tensor& t) { return t.dim() > 3 ? t.flatten(2) : t; };
    const torch::Tensor ref_out = reference(as_1d(whole)).view(shape);
    (ref_out * g).sum().backward();

    TESSERA_RETURN_IF_ERROR(Close(out, ref_out.index_select(0, rows), what + "output"));
    TESSERA_RETURN_IF_ERROR(
        Close(mine.grad(), whole.grad().index_select(0, rows), what + "input gradient"));
    // Weight and bias gradients are this shard's part: summed over ranks.
    torch::Tensor affine_grads = torch::cat({sync->weight.grad(), sync->bias.grad()});
    TESSERA_RETURN_IF_ERROR(group.Allreduce(affine_grads).Wait(absl::Seconds(20)).status());
    TESSERA_RETURN_IF_ERROR(Close(affine_grads,
                                  torch::cat({reference->weight.grad(), reference->bias.grad()}),
                                  what + "weight and bias gradients, summed"));
    TESSERA_RETURN_IF_ERROR(
        Close(sync->running_mean, reference->running_mean, what + "running mean"));
    TESSERA_RETURN_IF_ERROR(
        Close(sync->running_var, reference->running_var, what + "running variance"));

    sync->eval();
    reference->eval();
    for (int k = 0; k < (r == 0 ? 2 : 0); ++k) {
      torch::NoGradGuard no_grad;
      TESSERA_RETURN_IF_ERROR(Close(
          sync(mine), reference(as_1d(x)).view(shape).index_select(0, rows), what + "eval output"));
    }
    TESSERA_RETURN_IF_ERROR(GroupStillInStep(group, what + "eval forwards"));
  }
  return absl::OkStatus();
}

// bfloat16 and Half inputs, with float parameters (mixed precision) or the
// module converted to the input's dtype: outputs keep the input's dtype and
// match one float BatchNorm on the whole (rounded) batch within the dtype's
// precision, gradients likewise; the running statistics too.
absl::Status RunReducedPrecision(collectives::ProcessGroup& group) {
  const torch::Tensor rows = group.rank() == 0 ? torch::arange(0, 3) : torch::arange(3, 8);
  struct Case {
    torch::Dtype input;
    torch::Dtype module;
  };
  for (const Case& c : {Case{torch::kBFloat16, torch::kFloat},
                        {torch::kBFloat16, torch::kBFloat16},
                        {torch::kHalf, torch::kFloat},
                        {torch::kHalf, torch::kHalf}}) {
    const std::string what =
        absl::StrCat(c10::toString(c.input), " input, ", c10::toString(c.module), " module: ");
    torch::manual_seed(12);
    const torch::Tensor x = (torch::randn({8, 3, 4, 4}) * 3 + 1).to(c.input);
    const torch::Tensor g = torch::randn({8, 3, 4, 4}).to(c.input);
    const torch::Tensor gamma = (torch::rand({3}) + 0.5).to(c.module);
    const torch::Tensor beta = torch::randn({3}).to(c.module);

    ddp::SyncBatchNormOptions options(3);
    options.timeout = absl::Seconds(20);
    ddp::SyncBatchNorm sync(options, &group);
    sync->to(c.module);
    torch::nn::BatchNorm2d reference(3);
    {
      torch::NoGradGuard no_grad;
      sync->weight.copy_(gamma);
      sync->bias.copy_(beta);
      reference->weight.copy_(gamma);
      reference->bias.copy_(beta);
    }
    const torch::Tensor mine = x.index_select(0, rows).requires_grad_();
    const torch::Tensor out = sync(mine);
    if (out.scalar_type() != c.input) {
      return absl::InternalError(what + "output dtype " + c10::toString(out.scalar_type()));
    }
    (out * g.index_select(0, rows)).sum().backward();
    const torch::Tensor whole = x.to(torch::kFloat).requires_grad_();
    const torch::Tensor ref_out = reference(whole);
    (ref_out * g.to(torch::kFloat)).sum().backward();
    // bfloat16 keeps 8 significant bits, Half 11.
    const double tol = c.input == torch::kBFloat16 ? 3e-2 : 5e-3;
    TESSERA_RETURN_IF_ERROR(Close(out, ref_out.index_select(0, rows), what + "output", tol, tol));
    TESSERA_RETURN_IF_ERROR(
        Close(mine.grad(), whole.grad().index_select(0, rows), what + "input gradient", tol, tol));
    TESSERA_RETURN_IF_ERROR(
        Close(sync->running_mean, reference->running_mean, what + "running mean", tol, tol));
    TESSERA_RETURN_IF_ERROR(
        Close(sync->running_var, reference->running_var, what + "running variance", tol, tol));
    sync->eval();
    reference->eval();
    torch::NoGradGuard no_grad;
    TESSERA_RETURN_IF_ERROR(
        Close(sync(mine), reference(whole).index_select(0, rows), what + "eval output", tol, tol));
  }
  return absl::OkStatus();
}

// A small CNN whose normalisation is a SyncBatchNorm (replicas) or a
// BatchNorm2d (the one-process reference).
struct NetImpl : torch::nn::Module {
  NetImpl(int64_t seed, collectives::ProcessGroup* group) {
    torch::manual_seed(seed);
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    if (group != nullptr) {
      sync = register_module("norm", ddp::SyncBatchNorm(ddp::SyncBatchNormOptions(4), group));
    } else {
      plain = register_module("norm", torch::nn::BatchNorm2d(4));
    }
    fc = register_module("fc", torch::nn::Linear(4 * 4 * 4, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = conv->forward(x);
    x = sync ? sync->forward(x) : plain->forward(x);
    return fc->forward(torch::relu(x).flatten(1));
  }
  torch::nn::Conv2d conv{nullptr};
  ddp::SyncBatchNorm sync{nullptr};
  torch::nn::BatchNorm2d plain{nullptr};
  torch::nn::Linear fc{nullptr};
};

// DDP, each rank half of every batch: after 3 SGD steps, parameters and
// running statistics equal one process with BatchNorm2d on whole batches.
absl::Status RunDdpTraining(collectives::ProcessGroup& group) {
  const int r = group.rank();
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({8, 1, 6, 6});
  const torch::Tensor y = torch::randn({8, 3});
  const torch::Tensor half = torch::arange(r * 4, r * 4 + 4);
  auto replica = std::make_shared<NetImpl>(/*seed=*/r, &group);  // rank 0's weights win
  auto reference = std::make_shared<NetImpl>(/*seed=*/0, nullptr);
  ddp::DdpOptions options;
  options.bucket_cap_mb = 0.0005;  // several buckets around the norm's backward
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group, options);
  torch::optim::SGD opt(replica->parameters(), 0.1);
  torch::optim::SGD ref_opt(reference->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    torch::mse_loss(replica->forward(x.index_select(0, half)), y.index_select(0, half)).backward();
    opt.step();
    ref_opt.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    ref_opt.step();
  }
  auto got = replica->named_parameters();
  for (const auto& want : reference->named_parameters()) {
    TESSERA_RETURN_IF_ERROR(Close(got[want.key()], want.value(), "parameter " + want.key()));
  }
  auto got_buffers = replica->named_buffers();
  for (const auto& want : reference->named_buffers()) {
    TESSERA_RETURN_IF_ERROR(Close(got_buffers[want.key()].to(torch::kDouble),
                                  want.value().to(torch::kDouble), "buffer " + want.key()));
  }
  return absl::OkStatus();
}

using SyncBatchNormTest = TwoRankGlooTest;

TESSERA_TWO_RANK_TEST(SyncBatchNormTest, UnevenShardsNormaliseLikeTheWholeBatch, RunShards)
TESSERA_TWO_RANK_TEST(SyncBatchNormTest, BFloat16AndHalfInputsNormaliseLikeTheWholeBatch,
                      RunReducedPrecision)
TESSERA_TWO_RANK_TEST(SyncBatchNormTest, DdpWithSyncBatchNormTrainsLikeOneProcess, RunDdpTraining)

TEST(SyncBatchNormShapeTest, WrongChannelCountIsAClearError) {
  // Checked before any collective, so no group is needed to see it.
  ddp::SyncBatchNorm sync(ddp::SyncBatchNormOptions(3), nullptr);
  try {
    sync(torch::zeros({2, 4, 5}));
    FAIL() << "no error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected an input of shape (N, 3, *), got 3 "
                                         "dimensions with 4 channels"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::testing
