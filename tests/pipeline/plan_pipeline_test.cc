// Pipelines run from plans (see Note [Schedules as data],
// pipeline/schedule_plan.h) over real worker processes: each worker runs its
// own list of actions, activations and gradients go worker to worker, and
// every schedule — GPipe, 1F1B, Interleaved 1F1B, ZB-H1, ZBV — at 2 and 4
// workers, 1 and 2 chunks a worker, 4 and 8 micro-batches, computes the
// loss and gradients of the unsplit model in one process (to floating-point
// summation order); with a DistributedOptimizer the parameters then move
// as the local model's do.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/sgd.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "dist_optim/distributed_optimizer.h"
#include "pipeline/plan_driver.h"
#include "pipeline/schedules.h"
#include "tests/dist_autograd/dist_autograd_world.h"
#include "tests/pipeline/test_stages.h"

namespace tessera::testing {
namespace {

using dist_autograd::ContextGuard;

class PlanPipelineTest : public DistAutogradWorld {};

const std::vector<std::string> kWorkers = {"worker1", "worker2", "worker3", "worker4"};

// An MLP of `stages` stages (test_stages.h): front, hidden ..., back.
std::vector<pipeline::StageSpec> Model(int stages) {
  std::vector<pipeline::StageSpec> specs;
  for (int s = 0; s < stages; ++s) {
    specs.push_back({s == 0 ? "front" : s + 1 == stages ? "back" : "hidden", 10 + s});
  }
  return specs;
}

// The same model in this process: its loss on (x, y) and each stage's
// parameters' gradients (which it also leaves in the parameters' grad).
struct LocalStep {
  double loss = 0;
  std::vector<std::vector<at::Tensor>> gradients;
};

LocalStep RunLocally(const std::vector<pipeline::StageModel>& models, const at::Tensor& x,
                     const at::Tensor& y) {
  for (const auto& model : models) {
    for (const auto& p : model.parameters) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
  at::Tensor h = x;
  for (const auto& model : models) h = model.forward(h);
  at::Tensor loss = at::mse_loss(h, y);
  torch::autograd::backward({loss});
  LocalStep step{loss.item<double>(), {}};
  for (const auto& model : models) {
    std::vector<at::Tensor> grads;
    for (const auto& p : model.parameters) grads.push_back(p.grad().clone());
    step.gradients.push_back(grads);
  }
  return step;
}

void ExpectAllClose(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6))
        << what << " " << i << " differs by " << (got[i] - want[i]).abs().max().item<double>();
  }
}

TEST_F(PlanPipelineTest, EveryScheduleComputesTheGradientsOfTheUnsplitModel) {
  StartWorld(5);
  auto factories = TestStageFactories();
  for (auto [schedule, chunks] : std::vector<std::tuple<std::string, int>>{
           {"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"zb-h1", 1}, {"zbv", 2}}) {
    for (int p : {2, 4}) {
      for (int m : {4, 8}) {
        SCOPED_TRACE(schedule + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        auto plan = pipeline::MakePlan(schedule, p, chunks, m);
        ASSERT_TRUE(plan.ok()) << plan.status();
        const auto specs = Model(p * chunks);
        pipeline::PlanDriver driver(
            *rrefs_, *plan, std::vector<std::string>(kWorkers.begin(), kWorkers.begin() + p), specs,
            "mse");
        std::vector<pipeline::StageModel> local;
        for (const auto& [name, seed] : specs) local.push_back(factories[name](seed));
        at::manual_seed(p * 100 + m);
        // 3m - 1 rows: the last micro-batch is smaller than the others.
        const at::Tensor x = at::randn({3 * m - 1, 6}), y = at::randn({3 * m - 1, 3});
        const LocalStep want = RunLocally(local, x, y);

        ContextGuard context(*autograd_);
        const double loss = driver.Train(x, y);
        EXPECT_NEAR(loss, want.loss, 1e-5);
        for (int s = 0; s < plan->stages(); ++s) {
          ExpectAllClose(driver.Gradients(context.id(), s), want.gradients[s],
                         "stage " + std::to_string(s) + " gradient");
        }
      }
    }
  }
}

TEST_F(PlanPipelineTest, TheDistributedOptimizerStepsTheStagesAsTheLocalModelSteps) {
  StartWorld(3);
  auto plan = pipeline::ZeroBubbleVPlan(2, 4);
  ASSERT_TRUE(plan.ok());
  const auto specs = Model(4);
  pipeline::PlanDriver driver(*rrefs_, *plan, {"worker1", "worker2"}, specs, "mse");
  dist_optim::SgdOptions sgd;
  sgd.lr = 0.1;
  auto optimizer = dist_optim::DistributedOptimizer::Create(*rrefs_, driver.ParameterRRefs(), sgd);
  auto factories = TestStageFactories();
  std::vector<pipeline::StageModel> local;
  std::vector<at::Tensor> local_params;
  for (const auto& [name, seed] : specs) {
    local.push_back(factories[name](seed));
    local_params.insert(local_params.end(), local.back().parameters.begin(),
                        local.back().parameters.end());
  }
  torch::optim::SGD local_optimizer(local_params, torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    at::manual_seed(70 + step);
    const at::Tensor x = at::randn({12, 6}), y = at::randn({12, 3});
    const LocalStep want = RunLocally(local, x, y);
    ContextGuard context(*autograd_);
    EXPECT_NEAR(driver.Train(x, y), want.loss, 1e-5);
    for (int s = 0; s < 4; ++s) {
      ExpectAllClose(driver.Gradients(context.id(), s), want.gradients[s],
                     "stage " + std::to_string(s) + " gradient");
    }
    optimizer.Step(context.id());
    local_optimizer.step();  // from the gradients RunLocally left
  }
}

TEST_F(PlanPipelineTest, APlanThatCannotRunIsRefusedBeforeAnyStepNamingTheAction) {
  StartWorld(3);
  auto plan = pipeline::OneFOneBPlan(2, 4);
  ASSERT_TRUE(plan.ok());
  std::swap(plan->actions[1][0], plan->actions[1][1]);  // F0@1 before its receive
  try {
    pipeline::PlanDriver driver(*rrefs_, *plan, {"worker1", "worker2"}, Model(2), "mse");
    FAIL() << "a plan whose forward comes before its input was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1's action 0 (F0@1) needs the activation"),
              std::string::npos)
        << e.what();
  }
  try {
    auto good = pipeline::OneFOneBPlan(2, 4);
    pipeline::PlanDriver driver(*rrefs_, *good, {"worker1", "worker2"}, Model(2), "hinge");
    FAIL() << "an unknown loss was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("no pipeline loss named 'hinge'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::testing
