// Distributed autograd across real worker processes: gradients equal those
// of the same computation in one process, concurrent contexts, failures,
// and contexts released everywhere.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <thread>

#include "common/status.h"
#include "tests/dist_autograd/dist_autograd_world.h"

namespace tessera::testing {
namespace {

using dist_autograd::ContextGuard;

// x of shape [3, 4], a leaf that requires grad.
at::Tensor Input(uint64_t seed) {
  at::manual_seed(seed);
  return at::randn({3, 4}).set_requires_grad(true);
}

// The chain through `ranks` computed in this process, with fresh leaves:
// returns x's gradient and each rank's parameter gradient.
struct LocalGrads {
  at::Tensor x;
  std::map<int64_t, at::Tensor> params;
};
LocalGrads ChainLocally(const at::Tensor& x_in, const std::vector<int64_t>& ranks,
                        int repeat_sum = 1) {
  at::Tensor x = x_in.detach().clone().set_requires_grad(true);
  std::map<int64_t, at::Tensor> params;
  at::Tensor y = x;
  for (int64_t rank : ranks) {
    auto& param = params[rank];
    if (!param.defined()) param = ParamFor(rank);
    y = Stage(y, param);
  }
  at::Tensor loss = y.sum() * repeat_sum;
  torch::autograd::backward({loss});
  LocalGrads grads{x.grad(), {}};
  for (auto& [rank, param] : params) grads.params[rank] = param.grad();
  return grads;
}

class DistAutogradTest : public DistAutogradWorld {
 protected:
  // The gradient that worker `rank` accumulated for its parameter.
  at::Tensor RemoteParamGrad(int64_t context_id, int rank) {
    auto grads = rt().RpcSync<std::vector<at::Tensor>>(
        "worker" + std::to_string(rank), "param_grad", context_id);
    return grads.empty() ? at::Tensor() : grads[0];
  }
  at::Tensor LocalGrad(int64_t context_id, const at::Tensor& leaf) {
    auto grads = autograd_->GetGradients(context_id);
    return grads.contains(leaf) ? grads.at(leaf) : at::Tensor();
  }
  // Checks a chain call through `path` (worker names after this one) whose
  // stages ran on `ranks`.
  void CheckChain(const std::string& function, const std::vector<std::string>& path,
                  const std::vector<int64_t>& ranks, uint64_t seed) {
    at::Tensor x = Input(seed);
    LocalGrads expected = ChainLocally(x, ranks);
    ContextGuard context(*autograd_);
    std::vector<std::string> rest(path.begin() + 1, path.end());
    at::Tensor y = rt().RpcSync<at::Tensor>(path[0], function, x, rest);
    ASSERT_TRUE(y.requires_grad());
    autograd_->Backward(context.id(), {y.sum()});
    EXPECT_FALSE(x.grad().defined()) << "distributed backward must not write .grad";
    at::Tensor x_grad = LocalGrad(context.id(), x);
    ASSERT_TRUE(x_grad.defined());
    EXPECT_TRUE(at::allclose(x_grad, expected.x, 1e-5, 1e-6));
    for (const auto& [rank, grad] : expected.params) {
      at::Tensor got = RemoteParamGrad(context.id(), static_cast<int>(rank));
      ASSERT_TRUE(got.defined()) << "rank " << rank;
      EXPECT_TRUE(at::allclose(got, grad, 1e-5, 1e-6)) << "rank " << rank;
    }
  }
};

TEST_F(DistAutogradTest, TwoWorkersMatchLocalGradients) {
  StartWorld(2);
  CheckChain("chain", {"worker1"}, {1}, 1);
  ExpectNoContextsAnywhere();
}

TEST_F(DistAutogradTest, ChainOverThreeWorkersMatchesLocal) {
  StartWorld(3);
  CheckChain("chain", {"worker1", "worker2"}, {1, 2}, 2);
  CheckChain("chain_async", {"worker1", "worker2"}, {1, 2}, 3);
  ExpectNoContextsAnywhere();
}

// A -> B -> C -> A: the initiator's own function joins the graph, and a
// remote pass comes back to the initiator.
TEST_F(DistAutogradTest, ChainBackToInitiatorMatchesLocal) {
  StartWorld(3);
  at::Tensor x = Input(4);
  LocalGrads expected = ChainLocally(x, {1, 2, 0});
  {
    ContextGuard context(*autograd_);
    at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", x,
                                            std::vector<std::string>{"worker2", "worker0"});
    autograd_->Backward(context.id(), {y.sum()});
    EXPECT_TRUE(at::allclose(LocalGrad(context.id(), x), expected.x, 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 1), expected.params[1], 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 2), expected.params[2], 1e-5, 1e-6));
    // worker0's parameter was used by its own "chain", served here.
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 0), expected.params[0], 1e-5, 1e-6));
  }
  ExpectNoContextsAnywhere();
}

// A -> {B, C}: two branches whose results meet in the loss.
TEST_F(DistAutogradTest, FanOutMatchesLocal) {
  StartWorld(3);
  at::Tensor x = Input(5);
  at::Tensor x_local = x.detach().clone().set_requires_grad(true);
  at::Tensor w1 = ParamFor(1), w2 = ParamFor(2);
  torch::autograd::backward({(Stage(x_local, w1) * Stage(x_local, w2)).sum()});
  {
    ContextGuard context(*autograd_);
    const std::vector<std::string> none;
    auto b = rt().RpcAsync<at::Tensor>("worker1", "chain", x, none);
    auto c = rt().RpcAsync<at::Tensor>("worker2", "chain", x, none);
    at::Tensor loss = (ValueOrThrow(b.Wait(absl::Seconds(30))) *
                       ValueOrThrow(c.Wait(absl::Seconds(30))))
                          .sum();
    autograd_->Backward(context.id(), {loss});
    EXPECT_TRUE(at::allclose(LocalGrad(context.id(), x), x_local.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 1), w1.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 2), w2.grad(), 1e-5, 1e-6));
  }
  ExpectNoContextsAnywhere();
}

// remote() + to_here(), and a method call on a remote object.
TEST_F(DistAutogradTest, RRefCallsAreRecorded) {
  StartWorld(3);
  auto affine = rref::RemoteObject<Affine>(*rrefs_, "worker2", int64_t{7});
  at::Tensor x = Input(6);
  at::Tensor x_local = x.detach().clone().set_requires_grad(true);
  at::Tensor w1 = ParamFor(1), w7 = ParamFor(7);
  torch::autograd::backward({(Stage(Stage(x_local, w1), w7)).sum()});
  {
    ContextGuard context(*autograd_);
    auto held = rref::Remote<at::Tensor>(*rrefs_, "worker1", "chain", x,
                                         std::vector<std::string>{});
    at::Tensor h = held.to_here();
    at::Tensor y = affine.RpcSync<at::Tensor>("forward", h);
    autograd_->Backward(context.id(), {y.sum()});
    EXPECT_TRUE(at::allclose(LocalGrad(context.id(), x), x_local.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 1), w1.grad(), 1e-5, 1e-6));
    auto w7_grad = affine.RpcSync<std::vector<at::Tensor>>("grad", context.id());
    ASSERT_EQ(w7_grad.size(), 1u);
    EXPECT_TRUE(at::allclose(w7_grad[0], w7.grad(), 1e-5, 1e-6));
  }
  ExpectNoContextsAnywhere();
}

// Gradients accumulate over backward passes of one context.
TEST_F(DistAutogradTest, GradientsAccumulateWithinAContext) {
  StartWorld(2);
  at::Tensor x = Input(7);
  LocalGrads expected = ChainLocally(x, {1}, /*repeat_sum=*/2);
  {
    ContextGuard context(*autograd_);
    for (int i = 0; i < 2; ++i) {
      at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", x, std::vector<std::string>{});
      autograd_->Backward(context.id(), {y.sum()});
    }
    EXPECT_TRUE(at::allclose(LocalGrad(context.id(), x), expected.x, 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(RemoteParamGrad(context.id(), 1), expected.params[1], 1e-5, 1e-6));
  }
  ExpectNoContextsAnywhere();
}

TEST_F(DistAutogradTest, ConcurrentContextsKeepTheirGradientsApart) {
  StartWorld(3);
  constexpr int kThreads = 4, kRounds = 8;
  std::vector<std::thread> threads;
  std::atomic<int> matched{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        at::Tensor x = (at::ones({3, 4}) * (0.1 * (t + 1) + 0.01 * round))
                           .set_requires_grad(true);
        LocalGrads expected = ChainLocally(x, {1, 2});
        ContextGuard context(*autograd_);
        at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", x,
                                                std::vector<std::string>{"worker2"});
        auto status = autograd_->TryBackward(context.id(), {y.sum()});
        if (!status.ok()) {
          ADD_FAILURE() << status;
          continue;
        }
        if (at::allclose(LocalGrad(context.id(), x), expected.x, 1e-5, 1e-6) &&
            at::allclose(RemoteParamGrad(context.id(), 2), expected.params[2], 1e-5, 1e-6)) {
          ++matched;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(matched.load(), kThreads * kRounds);
  ExpectNoContextsAnywhere();
}

TEST_F(DistAutogradTest, RemoteBackwardFailureFailsTheCallAndContextsAreReleased) {
  StartWorld(3);
  {
    ContextGuard context(*autograd_);
    at::Tensor x = Input(8);
    at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", x,
                                            std::vector<std::string>{"worker2"});
    at::Tensor z = rt().RpcSync<at::Tensor>("worker2", "throwing", y);
    auto status = autograd_->TryBackward(context.id(), {z.sum()}, false, absl::Seconds(30));
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find("deliberate failure in backward"), std::string::npos)
        << status;
    EXPECT_NE(status.message().find("worker2"), std::string::npos) << status;
  }
  ExpectNoContextsAnywhere();
  // The workers keep serving.
  CheckChain("chain", {"worker1"}, {1}, 9);
}

TEST_F(DistAutogradTest, DeadPeerFailsBackwardWithoutHanging) {
  expect_clean_exit_ = false;
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}}, absl::Seconds(5));
  ContextGuard context(*autograd_);
  at::Tensor x = Input(10);
  at::Tensor y = rt().RpcSync<at::Tensor>("worker2", "chain", x, std::vector<std::string>{});
  children_[1]->Kill();
  EXPECT_NE(children_[1]->Wait(absl::Seconds(30)), 0);
  // The deadline is far off: the call must fail because the peer is gone
  // (Unavailable), not because it waited out its timeout.
  auto status = autograd_->TryBackward(context.id(), {y.sum()}, false, absl::Seconds(120));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("worker2"), std::string::npos) << status;
  // The survivor still serves.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
}

// A worker that dies leaves contexts it created on others: they are
// released there when the death is noticed.
TEST_F(DistAutogradTest, ContextsOfADeadCreatorAreReleased) {
  expect_clean_exit_ = false;
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}}, absl::Seconds(5));
  rt().RpcSync<int64_t>("worker1", "leak_context", "worker2");
  ASSERT_TRUE(rt().RpcSync<bool>("worker2", "await_contexts", int64_t{1}, int64_t{30000}));
  children_[0]->Kill();
  EXPECT_NE(children_[0]->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(rt().RpcSync<bool>("worker2", "await_contexts", int64_t{0}, int64_t{30000}));
}

// Gradients for contexts or send functions a worker does not have, or of
// the wrong shape, are refused with a clear error; the worker keeps serving.
TEST_F(DistAutogradTest, BogusGradientMessagesAreRefused) {
  StartWorld(2);
  auto send = [&](int64_t context_id, int64_t send_id, std::vector<at::Tensor> grads) {
    return rt().CallInternal(1, "dist_autograd.backward",
                             {c10::IValue(context_id), c10::IValue(send_id),
                              rpc::ToIValue(std::move(grads))})
        .Wait(absl::Seconds(30))
        .status();
  };
  auto unknown = send(424242, 1, {at::ones({2})});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_NE(unknown.message().find("no distributed autograd context"), std::string::npos);
  ContextGuard context(*autograd_);
  // worker1 records a send function for its response (id unknown to us).
  at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", Input(12),
                                          std::vector<std::string>{});
  auto no_send = send(context.id(), 999999, {at::ones({3, 4})});
  EXPECT_EQ(no_send.code(), absl::StatusCode::kNotFound) << no_send;
  EXPECT_NE(no_send.message().find("no send function"), std::string::npos) << no_send;
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{7}), 7);
  autograd_->Backward(context.id(), {y.sum()});  // the real pass still works
}

TEST_F(DistAutogradTest, MisuseGetsClearErrors) {
  StartWorld(2);
  EXPECT_EQ(autograd_->TryBackward(12345, {at::ones({1}).set_requires_grad(true)}).code(),
            absl::StatusCode::kNotFound);
  ContextGuard context(*autograd_);
  EXPECT_THROW(ContextGuard nested(*autograd_), StatusError);
  EXPECT_EQ(autograd_->TryBackward(context.id(), {at::ones({1})}).code(),
            absl::StatusCode::kInvalidArgument);
  at::Tensor y = rt().RpcSync<at::Tensor>("worker1", "chain", Input(11),
                                          std::vector<std::string>{});
  try {
    torch::autograd::backward({y.sum()});
    ADD_FAILURE() << "a local backward through a received tensor must fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("dist_autograd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::testing
