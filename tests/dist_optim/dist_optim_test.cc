// DistributedOptimizer across real worker processes: every optimizer kind
// trains remote parameters exactly as LibTorch's optimizer trains local
// ones, concurrent trainers lose no update, and bad options fail at once.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/optimizer.h>

#include <thread>

#include "common/status.h"
#include "dist_optim/distributed_optimizer.h"
#include "tests/dist_autograd/dist_autograd_world.h"

namespace tessera::testing {
namespace {

using dist_autograd::ContextGuard;
using dist_optim::DistributedOptimizer;
using rref::RRef;

class DistOptimTest : public DistAutogradWorld {
 protected:
  // A copy of `value` made a parameter on `owner`.
  RRef<at::Tensor> ParamOn(const std::string& owner, const at::Tensor& value) {
    at::Tensor flat = value.detach().contiguous().to(at::kDouble).flatten();
    std::vector<double> values(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    return rref::Remote<at::Tensor>(*rrefs_, owner, "new_param", values,
                                    value.sizes().vec());
  }
};

TEST_F(DistOptimTest, EveryOptimizerMatchesLocalTraining) {
  StartWorld(3);
  dist_optim::SgdOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  sgd.nesterov = true;
  dist_optim::AdamOptions adam;
  adam.lr = 0.01;
  adam.amsgrad = true;
  dist_optim::AdamWOptions adamw;
  adamw.lr = 0.01;
  dist_optim::AdagradOptions adagrad;
  adagrad.lr_decay = 0.01;
  dist_optim::RmsPropOptions rmsprop;
  rmsprop.momentum = 0.5;
  rmsprop.centered = true;
  const std::vector<dist_optim::OptimizerOptions> kinds = {sgd, adam, adamw, adagrad, rmsprop};
  for (const auto& options : kinds) {
    const std::string kind = dist_optim::ToWire(options).kind;
    SCOPED_TRACE(kind);
    at::Tensor w1_local = ParamFor(1), w2_local = ParamFor(2);
    auto local = ValueOrThrow(dist_optim::MakeOptimizer(dist_optim::ToWire(options),
                                                        {w1_local, w2_local}));
    RRef<at::Tensor> w1 = ParamOn("worker1", w1_local), w2 = ParamOn("worker2", w2_local);
    auto remote = DistributedOptimizer::Create(*rrefs_, {w1, w2}, options);
    EXPECT_EQ(remote.num_owners(), 2u);
    for (int step = 0; step < 4; ++step) {
      at::manual_seed(100 + step);
      at::Tensor x = at::randn({5, 4}), target = at::randn({5, 4});
      local->zero_grad();
      torch::autograd::backward(
          {(Stage(Stage(x, w1_local), w2_local) - target).pow(2).mean()});
      local->step();
      ContextGuard context(*autograd_);
      at::Tensor h = rt().RpcSync<at::Tensor>("worker1", "apply_stage", x, w1);
      at::Tensor y = rt().RpcSync<at::Tensor>("worker2", "apply_stage", h, w2);
      autograd_->Backward(context.id(), {(y - target).pow(2).mean()});
      remote.Step(context.id());
    }
    EXPECT_TRUE(at::allclose(w1.to_here(), w1_local, 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(w2.to_here(), w2_local, 1e-5, 1e-6));
    EXPECT_FALSE(at::allclose(w1.to_here(), ParamFor(1))) << "the parameters must move";
  }
  ExpectNoContextsAnywhere();
}

// A checkpoint's optimizer state: Adam trained two steps, its state saved,
// a second DistributedOptimizer over the same parameters loads it and
// trains two more — ending where four local steps end (with fresh moments
// and step counts it would not), and a state of the wrong shape is refused.
TEST_F(DistOptimTest, SavedStateResumesTraining) {
  StartWorld(3);
  dist_optim::AdamOptions adam;
  adam.lr = 0.01;
  at::Tensor w1_local = ParamFor(1), w2_local = ParamFor(2);
  auto local =
      ValueOrThrow(dist_optim::MakeOptimizer(dist_optim::ToWire(adam), {w1_local, w2_local}));
  RRef<at::Tensor> w1 = ParamOn("worker1", w1_local), w2 = ParamOn("worker2", w2_local);
  auto first = DistributedOptimizer::Create(*rrefs_, {w1, w2}, adam);
  auto second = DistributedOptimizer::Create(*rrefs_, {w1, w2}, adam);
  for (int step = 0; step < 4; ++step) {
    at::manual_seed(100 + step);
    at::Tensor x = at::randn({5, 4}), target = at::randn({5, 4});
    local->zero_grad();
    torch::autograd::backward({(Stage(Stage(x, w1_local), w2_local) - target).pow(2).mean()});
    local->step();
    if (step == 2) second.LoadState(first.SaveState());
    ContextGuard context(*autograd_);
    at::Tensor h = rt().RpcSync<at::Tensor>("worker1", "apply_stage", x, w1);
    at::Tensor y = rt().RpcSync<at::Tensor>("worker2", "apply_stage", h, w2);
    autograd_->Backward(context.id(), {(y - target).pow(2).mean()});
    (step < 2 ? first : second).Step(context.id());
  }
  EXPECT_TRUE(at::allclose(w1.to_here(), w1_local, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(w2.to_here(), w2_local, 1e-5, 1e-6));
  EXPECT_THROW(second.LoadState({at::zeros({3}, at::kByte)}), StatusError);
  ExpectNoContextsAnywhere();
}

// Several trainers, each with its own optimizer, step one parameter at
// once: with SGD (lr 1) and a gradient of ones per step, every step must
// show in the final value.
TEST_F(DistOptimTest, ConcurrentTrainersLoseNoUpdate) {
  StartWorld(2);
  RRef<at::Tensor> param = ParamOn("worker1", at::zeros({8}));
  constexpr int kTrainers = 4, kSteps = 25;
  dist_optim::SgdOptions sgd;
  sgd.lr = 1.0;
  std::vector<std::thread> trainers;
  std::atomic<int> steps_done{0};
  for (int t = 0; t < kTrainers; ++t) {
    trainers.emplace_back([&] {
      const absl::Status status = StatusOf([&] {
        auto optimizer = DistributedOptimizer::Create(*rrefs_, {param}, sgd);
        for (int step = 0; step < kSteps; ++step) {
          ContextGuard context(*autograd_);
          at::Tensor loss = rt().RpcSync<at::Tensor>("worker1", "param_sum", param);
          autograd_->Backward(context.id(), {loss});
          optimizer.Step(context.id());
          ++steps_done;
        }
      });
      if (!status.ok()) ADD_FAILURE() << status;
    });
  }
  for (auto& trainer : trainers) trainer.join();
  ASSERT_EQ(steps_done.load(), kTrainers * kSteps);
  EXPECT_TRUE(at::allclose(param.to_here(), at::zeros({8}) - kTrainers * kSteps))
      << param.to_here();
}

TEST_F(DistOptimTest, BadOptionsFailAtCreate) {
  StartWorld(2);
  RRef<at::Tensor> param = ParamOn("worker1", at::zeros({2}));
  dist_optim::SgdOptions sgd;
  sgd.lr = -1;
  const absl::Status status =
      StatusOf([&] { DistributedOptimizer::Create(*rrefs_, {param}, sgd); });
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("learning rate"), std::string::npos) << status;
  EXPECT_NE(status.message().find("worker1"), std::string::npos) << status;
}

}  // namespace
}  // namespace tessera::testing
