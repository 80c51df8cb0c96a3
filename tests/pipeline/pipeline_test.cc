// Pipeline parallelism over real worker processes: a two-stage MLP on
// worker1 and worker2 driven from worker0 with micro-batches trains exactly
// like the same model in one process — same loss, same gradients, same
// parameters after each step.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/sgd.h>

#include "common/status.h"
#include "dist_optim/distributed_optimizer.h"
#include "pipeline/pipeline_driver.h"
#include "rref/remote.h"
#include "tests/dist_autograd/dist_autograd_world.h"
#include "tests/pipeline/test_stages.h"

namespace tessera::testing {
namespace {

using dist_autograd::ContextGuard;
using pipeline::Stage;
using rref::RRef;

class PipelineTest : public DistAutogradWorld {};

void ExpectAllClose(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6))
        << what << " " << i << " differs by " << (got[i] - want[i]).abs().max().item<double>()
        << " (norms " << got[i].norm().item<double>() << " vs " << want[i].norm().item<double>() << ")";
  }
}

TEST_F(PipelineTest, MicroBatchedStagesTrainLikeOneProcess) {
  StartWorld(3);
  auto front = rref::RemoteObject<Stage>(*rrefs_, "worker1", std::string("front"), int64_t{1});
  auto back = rref::RemoteObject<Stage>(*rrefs_, "worker2", std::string("back"), int64_t{2});
  pipeline::PipelineDriver driver(*rrefs_, {front, back}, /*micro_batches=*/4);
  dist_optim::SgdOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  auto optimizer = dist_optim::DistributedOptimizer::Create(*rrefs_, driver.ParameterRRefs(), sgd);

  // The same model, same initial values, in this process.
  auto factories = TestStageFactories();
  pipeline::StageModel local_front = factories["front"](1), local_back = factories["back"](2);
  std::vector<at::Tensor> local_params = local_front.parameters;
  local_params.insert(local_params.end(), local_back.parameters.begin(),
                      local_back.parameters.end());
  torch::optim::SGD local_optimizer(local_params,
                                    torch::optim::SGDOptions(0.1).momentum(0.9));

  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    at::manual_seed(50 + step);
    // 10 rows in 4 micro-batches: 3, 3, 3, 1.
    const at::Tensor x = at::randn({10, 6}), y = at::randn({10, 3});
    local_optimizer.zero_grad();
    at::Tensor local_loss = at::mse_loss(local_back.forward(local_front.forward(x)), y);
    torch::autograd::backward({local_loss});
    std::vector<at::Tensor> local_grads;
    for (const auto& p : local_params) local_grads.push_back(p.grad().clone());
    local_optimizer.step();

    ContextGuard context(*autograd_);
    at::Tensor loss = at::mse_loss(driver.Forward(x), y);
    EXPECT_TRUE(at::allclose(loss, local_loss, 1e-5, 1e-6));
    autograd_->Backward(context.id(), {loss});
    auto grads = front.RpcSync<std::vector<at::Tensor>>("gradients", context.id());
    auto back_grads = back.RpcSync<std::vector<at::Tensor>>("gradients", context.id());
    grads.insert(grads.end(), back_grads.begin(), back_grads.end());
    ExpectAllClose(grads, local_grads, "gradient");
    optimizer.Step(context.id());
  }
  // One row per micro-batch: 10 chains in flight at once give the same
  // output as one micro-batch (each stage's input RRef is dropped while its
  // fetch is in flight: Note [Calls hold their RRef]).
  pipeline::PipelineDriver one(*rrefs_, {front, back}, /*micro_batches=*/1);
  pipeline::PipelineDriver ten(*rrefs_, {front, back}, /*micro_batches=*/10);
  for (int round = 0; round < 5; ++round) {
    const at::Tensor x = at::randn({10, 6});
    EXPECT_TRUE(at::allclose(ten.Forward(x), one.Forward(x), 1e-5, 1e-6));
  }
  auto values = front.RpcSync<std::vector<at::Tensor>>("parameter_values");
  auto back_values = back.RpcSync<std::vector<at::Tensor>>("parameter_values");
  values.insert(values.end(), back_values.begin(), back_values.end());
  ExpectAllClose(values, local_params, "parameter");
  ExpectNoContextsAnywhere();
}

TEST_F(PipelineTest, UnknownStageModelIsNamedInTheError) {
  StartWorld(2);
  auto stage = rref::RemoteObject<Stage>(*rrefs_, "worker1", std::string("middle"), int64_t{1});
  try {
    stage.RpcSync<std::vector<at::Tensor>>("parameter_values");
    FAIL() << "expected an error";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("no pipeline stage model named 'middle'"),
              std::string::npos)
        << e.what();
  }
  // Through a driver: the micro-batch and the cause are named.
  pipeline::PipelineDriver broken(*rrefs_, {stage}, /*micro_batches=*/2);
  try {
    broken.Forward(at::randn({4, 6}));
    FAIL() << "expected an error";
  } catch (const StatusError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("pipeline forward of micro-batch 0 of 2"), std::string::npos)
        << message;
    EXPECT_NE(message.find("no pipeline stage model named 'middle'"), std::string::npos)
        << message;
  }
  // The worker keeps serving.
  auto good = rref::RemoteObject<Stage>(*rrefs_, "worker1", std::string("front"), int64_t{1});
  EXPECT_EQ(good.RpcSync<std::vector<at::Tensor>>("parameter_values").size(), 2u);
}

}  // namespace
}  // namespace tessera::testing
