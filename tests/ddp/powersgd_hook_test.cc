// PowerSGD as a DDP communication hook over two real ranks (Gloo): it
// converges on a small regression problem about as plain DDP does, both
// ranks keep identical parameters, and each pass puts exactly the bytes
// that rank r predicts on the wire.
#include "ddp/powersgd_hook.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

std::shared_ptr<torch::nn::SequentialImpl> Model(int64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(32, 16), torch::nn::Tanh(),
                                                     torch::nn::Linear(16, 4));
}

struct Run {
  std::vector<double> losses;  // per step, this rank's
  std::shared_ptr<torch::nn::SequentialImpl> model;
};

// `steps` of SGD with DDP under `hook` (null: plain allreduce) on a
// teacher's outputs; each rank its own samples.
absl::StatusOr<Run> Train(collectives::ProcessGroup& group, std::shared_ptr<ddp::CommHook> hook,
                          int steps) {
  auto teacher = Model(99);
  Run run{{}, Model(1)};
  ddp::DdpOptions options;
  options.comm_hook = std::move(hook);
  auto ddp = ddp::DistributedDataParallel::Create(run.model, &group, options);
  torch::optim::SGD sgd(run.model->parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(1000 * step + group.rank());
    const torch::Tensor x = torch::randn({32, 32});
    const torch::Tensor y = teacher->forward(x).detach();
    sgd.zero_grad();
    torch::Tensor loss = torch::mse_loss(run.model->forward(x), y);
    loss.backward();
    sgd.step();
    run.losses.push_back(loss.item<double>());
  }
  return run;
}

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += v[i];
  return sum / static_cast<double>(to - from);
}

absl::Status PowerSgdConvergesAndSendsWhatRankPredicts(collectives::ProcessGroup& group) {
  // Bytes: Linear(32, 16)'s weight is a 16 x 32 matrix sent as P (16 x 2)
  // and Q (32 x 2); the 4 x 16 weight would cost 2 x (4 + 16) = 40 > 64 / 2
  // elements compressed, so it goes as is with the biases.
  ddp::PowerSgdOptions options;
  options.matrix_rank = 2;
  options.start_step = 2;
  auto power = std::make_shared<ddp::PowerSgdHook>(options);
  const int64_t plain_pass = 4 * (16 * 32 + 16 + 4 * 16 + 4);
  const int64_t compressed_pass = 4 * (2 * (16 + 32) + 16 + 4 * 16 + 4);
  if (!ddp::PowerSgdHook::Compresses(16, 32, 2, 2) || ddp::PowerSgdHook::Compresses(4, 16, 2, 2)) {
    return absl::InternalError("compression decisions differ from the prediction");
  }
  std::vector<int64_t> after;
  auto model = Model(1);
  {
    ddp::DdpOptions ddp_options;
    ddp_options.comm_hook = power;
    auto ddp = ddp::DistributedDataParallel::Create(model, &group, ddp_options);
    for (int pass = 0; pass < 4; ++pass) {
      torch::mse_loss(model->forward(torch::randn({4, 32})), torch::randn({4, 4})).backward();
      after.push_back(power->bytes_communicated());
    }
  }
  const std::vector<int64_t> want = {plain_pass, 2 * plain_pass, 2 * plain_pass + compressed_pass,
                                     2 * plain_pass + 2 * compressed_pass};
  if (after != want) {
    return absl::InternalError(absl::StrCat("bytes after each pass: ", after[0], ", ", after[1],
                                            ", ", after[2], ", ", after[3], "; predicted ", want[0],
                                            ", ", want[1], ", ", want[2], ", ", want[3]));
  }

  // Convergence: rank 1 with error feedback ends near plain DDP.
  constexpr int kSteps = 150;
  TESSERA_ASSIGN_OR_RETURN(auto plain, Train(group, nullptr, kSteps));
  options.matrix_rank = 1;
  TESSERA_ASSIGN_OR_RETURN(auto compressed,
                           Train(group, std::make_shared<ddp::PowerSgdHook>(options), kSteps));
  const double first = Mean(compressed.losses, 0, 10);
  const double last = Mean(compressed.losses, kSteps - 10, kSteps);
  const double plain_last = Mean(plain.losses, kSteps - 10, kSteps);
  if (!(last < 0.1 * first) || !(last < 2 * plain_last + 1e-3)) {
    return absl::InternalError(absl::StrCat("PowerSGD loss ", first, " -> ", last,
                                            " (plain DDP ends at ", plain_last, ")"));
  }
  // The ranks apply the same approximation: identical parameters.
  for (const auto& p : compressed.model->parameters()) {
    torch::Tensor rank0 = p.detach().clone();
    TESSERA_RETURN_IF_ERROR(group.Broadcast(rank0, 0).Wait(absl::Seconds(30)).status());
    if (!torch::equal(rank0, p.detach())) {
      return absl::InternalError("ranks diverged under PowerSGD");
    }
  }
  std::printf("rank %d: PowerSGD r=1 loss %.5f -> %.5f, plain DDP ends at %.5f\n", group.rank(),
              first, last, plain_last);
  return absl::OkStatus();
}

class PowerSgdHookTest : public TwoRankGlooTest {};
TESSERA_TWO_RANK_TEST(PowerSgdHookTest, ConvergesAndSendsWhatRankPredicts,
                      PowerSgdConvergesAndSendsWhatRankPredicts)

TEST(PowerSgdHook, CompressesOnlyWhenWorthIt) {
  EXPECT_TRUE(ddp::PowerSgdHook::Compresses(64, 64, 4, 2));   // 512 vs 4096
  EXPECT_FALSE(ddp::PowerSgdHook::Compresses(4, 4, 4, 2));    // rank capped at 4: 32 vs 16
  EXPECT_FALSE(ddp::PowerSgdHook::Compresses(10, 10, 3, 2));  // 60 x 2 > 100
  EXPECT_EQ(ddp::CommHookNamed("powersgd:3")->name(), "powersgd:3");
  EXPECT_EQ(ddp::CommHookNamed("powersgd:x"), nullptr);
}

}  // namespace
}  // namespace tessera::testing
