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
  pipeline::PipelineDriver driver(*rrefs_, {front, back},
                                  pipeline::PipelineOptions{/*micro_batches=*/4});
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
  // fetch is in flight: see Note [Calls hold their RRef]).
  pipeline::PipelineDriver one(*rrefs_, {front, back},
                               pipeline::PipelineOptions{/*micro_batches=*/1});
  pipeline::PipelineDriver ten(*rrefs_, {front, back},
                               pipeline::PipelineOptions{/*micro_batches=*/10});
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

// Both schedules of Train give the one-process model's gradients (and
// GPipe's through Forward + distributed autograd), and 1F1B keeps at most
// `stages` micro-batches' activations alive on a stage while GPipe keeps
// all of them.
TEST_F(PipelineTest, OneFOneBGivesGPipesGradientsWithActivationsBoundedByStages) {
  StartWorld(4);
  const std::vector<std::pair<std::string, std::string>> placement = {
      {"worker1", "front"}, {"worker2", "hidden"}, {"worker3", "back"}};
  std::vector<RRef<Stage>> stages;
  auto factories = TestStageFactories();
  std::vector<pipeline::StageModel> local;
  std::vector<at::Tensor> local_params;
  for (size_t k = 0; k < placement.size(); ++k) {
    const auto seed = static_cast<int64_t>(k + 1);
    stages.push_back(
        rref::RemoteObject<Stage>(*rrefs_, placement[k].first, placement[k].second, seed));
    local.push_back(factories[placement[k].second](seed));
    local_params.insert(local_params.end(), local.back().parameters.begin(),
                        local.back().parameters.end());
  }
  const int64_t micro_batches = 8;
  auto driver_for = [&](pipeline::Schedule schedule) {
    pipeline::PipelineOptions options;
    options.micro_batches = micro_batches;
    options.schedule = schedule;
    return pipeline::PipelineDriver(*rrefs_, stages, options);
  };
  // The first use of the fresh stage RRefs is step 0's Forward + Backward:
  // methods then run once the stage objects exist, on other threads, and
  // must still run in the context (they once ran outside it, and stage 1's
  // gradients came out zero).
  pipeline::PipelineDriver gpipe = driver_for(pipeline::Schedule::kGPipe);
  pipeline::PipelineDriver one_f_one_b = driver_for(pipeline::Schedule::kOneFOneB);
  auto gradients = [&](int64_t context_id) {
    std::vector<at::Tensor> all;
    for (const auto& stage : stages) {
      auto mine = stage.RpcSync<std::vector<at::Tensor>>("gradients", context_id);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    return all;
  };
  auto mse = [](const at::Tensor& output, const at::Tensor& target) {
    return at::mse_loss(output, target);
  };

  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    at::manual_seed(70 + step);
    // 29 rows in 8 micro-batches: 4 x 7 and 1 (unequal weights).
    const at::Tensor x = at::randn({29, 6}), y = at::randn({29, 3});
    at::Tensor h = x;
    for (auto& model : local) h = model.forward(h);
    at::Tensor local_loss = at::mse_loss(h, y);
    std::vector<at::Tensor> local_grads = torch::autograd::grad({local_loss}, local_params);

    std::vector<at::Tensor> by_forward;
    {
      ContextGuard context(*autograd_);
      at::Tensor loss = at::mse_loss(gpipe.Forward(x), y);
      autograd_->Backward(context.id(), {loss});
      by_forward = gradients(context.id());
    }
    for (auto* driver : {&gpipe, &one_f_one_b}) {
      SCOPED_TRACE(pipeline::ScheduleName(driver->schedule()));
      ContextGuard context(*autograd_);
      pipeline::StepResult result = driver->Train(x, y, mse);
      EXPECT_NEAR(result.loss, local_loss.item<double>(), 1e-5);
      EXPECT_TRUE(at::allclose(result.output, h, 1e-5, 1e-6));
      const std::vector<at::Tensor> grads = gradients(context.id());
      ExpectAllClose(grads, local_grads, "gradient vs one process");
      ExpectAllClose(grads, by_forward, "gradient vs Forward + Backward");
      const std::vector<int64_t> peaks = driver->PeakActivations();
      ASSERT_EQ(peaks.size(), stages.size());
      for (size_t k = 0; k < stages.size(); ++k) {
        SCOPED_TRACE(k);
        if (driver->schedule() == pipeline::Schedule::kOneFOneB) {
          EXPECT_LE(peaks[k], static_cast<int64_t>(stages.size()));
          EXPECT_GE(peaks[k], 1);
        } else {
          EXPECT_EQ(peaks[k], micro_batches);  // all forwards before any backward
        }
      }
      // Every micro-batch's graph was freed by its backward.
      for (const auto& stage : stages) {
        EXPECT_EQ(stage.RpcSync<std::vector<int64_t>>("activations", false).at(0), 0);
      }
    }
  }
  ExpectNoContextsAnywhere();
}

TEST_F(PipelineTest, ScheduledStepOutsideAContextIsRefusedAndNamed) {
  StartWorld(2);
  auto stage = rref::RemoteObject<Stage>(*rrefs_, "worker1", std::string("front"), int64_t{1});
  pipeline::PipelineOptions options;
  options.micro_batches = 2;
  options.schedule = pipeline::Schedule::kOneFOneB;
  pipeline::PipelineDriver driver(*rrefs_, {stage}, options);
  try {
    driver.Train(at::randn({4, 6}), at::randn({4, 8}),
                 [](const at::Tensor& out, const at::Tensor& t) { return at::mse_loss(out, t); });
    FAIL() << "expected an error";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("inside a distributed autograd context"),
              std::string::npos)
        << e.what();
  }
  // A wrong-shaped target fails the step naming the micro-batch; the stage
  // keeps serving the next step.
  ContextGuard context(*autograd_);
  const absl::Status wrong_shape = StatusOf([&] {
    driver.Train(at::randn({4, 6}), at::randn({4, 5}),
                 [](const at::Tensor& out, const at::Tensor& t) { return at::mse_loss(out, t); });
  });
  EXPECT_EQ(wrong_shape.code(), absl::StatusCode::kInvalidArgument) << wrong_shape;
  EXPECT_NE(wrong_shape.message().find("pipeline loss of micro-batch 0 of 2"), std::string::npos)
      << wrong_shape;
  pipeline::StepResult ok =
      driver.Train(at::randn({4, 6}), at::randn({4, 8}),
                   [](const at::Tensor& out, const at::Tensor& t) { return at::mse_loss(out, t); });
  EXPECT_EQ(ok.output.size(0), 4);
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
  pipeline::PipelineDriver broken(*rrefs_, {stage}, pipeline::PipelineOptions{/*micro_batches=*/2});
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
