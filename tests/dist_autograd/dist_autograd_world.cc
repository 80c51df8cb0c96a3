#include "tests/dist_autograd/dist_autograd_world.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <mutex>

#include "dist_optim/local_optimizer.h"
#include "pipeline/plan_worker.h"
#include "pipeline/stage.h"
#include "rpc/init.h"
#include "tests/pipeline/test_stages.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

// A node whose backward always fails.
class ThrowingBackward final : public torch::autograd::Node {
 public:
  using Node::Node;
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override {
    throw std::runtime_error("deliberate failure in backward");
  }
};

// The parameter each worker's "chain" uses: one per process and rank.
at::Tensor OwnParam(int rank) {
  static std::mutex mu;
  static std::map<int, at::Tensor> params;
  std::lock_guard<std::mutex> lock(mu);
  auto& param = params[rank];
  if (!param.defined()) param = ParamFor(rank);
  return param;
}

std::weak_ptr<dist_autograd::DistAutograd>& AffineAutograd() {
  static std::weak_ptr<dist_autograd::DistAutograd> autograd;
  return autograd;
}

std::vector<at::Tensor> GradOf(const dist_autograd::DistAutograd& autograd,
                               int64_t context_id, const at::Tensor& leaf) {
  auto grads = autograd.GetGradients(context_id);
  if (!grads.contains(leaf)) return {};
  return {grads.at(leaf)};
}

}  // namespace

at::Tensor ParamFor(int64_t rank) {
  return (at::linspace(-1, 1, 16).reshape({4, 4}) * (0.5 + 0.25 * rank))
      .set_requires_grad(true);
}

at::Tensor Stage(const at::Tensor& x, const at::Tensor& w) { return at::tanh(at::matmul(x, w)); }

std::vector<at::Tensor> Affine::Grad(int64_t context_id) {
  auto autograd = AffineAutograd().lock();
  if (autograd == nullptr) return {};
  return GradOf(*autograd, context_id, weight_);
}

void Affine::SetAutograd(std::shared_ptr<dist_autograd::DistAutograd> autograd) {
  AffineAutograd() = autograd;
}

rref::ClassRegistry MakeDistAutogradClasses() {
  rref::ClassRegistry classes;
  classes.Class<Affine>("Affine")
      .Constructor<int64_t>()
      .Method("forward", &Affine::Forward)
      .Method("grad", &Affine::Grad);
  dist_optim::RegisterLocalOptimizer(classes);
  pipeline::RegisterStage(classes, TestStageFactories());
  pipeline::RegisterPlanWorker(
      classes, TestStageFactories(),
      {{"mse", [](const at::Tensor& y, const at::Tensor& t) { return at::mse_loss(y, t); }}});
  return classes;
}

rpc::Registry MakeDistAutogradRegistry(std::shared_ptr<dist_autograd::DistAutograd> autograd) {
  Affine::SetAutograd(autograd);
  rpc::Registry registry = MakeTestRegistry();
  registry.Register("chain",
                    [](rpc::CallContext& ctx, at::Tensor x, std::vector<std::string> rest) {
                      at::Tensor y = Stage(x, OwnParam(ctx.runtime->self().rank));
                      if (rest.empty()) return y;
                      const std::string next = rest.front();
                      rest.erase(rest.begin());
                      return ctx.runtime->RpcSync<at::Tensor>(next, "chain", y, rest);
                    });
  registry.Register("chain_async",
                    [](rpc::CallContext& ctx, at::Tensor x, std::vector<std::string> rest) {
                      at::Tensor y = Stage(x, OwnParam(ctx.runtime->self().rank));
                      if (rest.empty()) return Future<at::Tensor>::Ready(y);
                      const std::string next = rest.front();
                      rest.erase(rest.begin());
                      return ctx.runtime->RpcAsync<at::Tensor>(next, "chain_async", y, rest);
                    });
  std::weak_ptr<dist_autograd::DistAutograd> weak = autograd;
  registry.Register("param_grad", [weak](rpc::CallContext& ctx, int64_t context_id) {
    auto autograd = weak.lock();
    if (autograd == nullptr) return std::vector<at::Tensor>{};
    return GradOf(*autograd, context_id, OwnParam(ctx.runtime->self().rank));
  });
  registry.Register("throwing", [](at::Tensor x) {
    at::Tensor y = x.detach().clone();
    auto node =
        std::make_shared<ThrowingBackward>(torch::autograd::collect_next_edges(x));
    node->add_input_metadata(y);
    torch::autograd::impl::set_gradient_edge(y, {node, 0});
    return y;
  });
  registry.Register("new_param", [](std::vector<double> values, std::vector<int64_t> shape) {
    return at::tensor(values, at::kFloat).reshape(shape).set_requires_grad(true);
  });
  registry.Register("apply_stage", [](at::Tensor x, rref::RRef<at::Tensor> w) {
    return Stage(x, w.local_value());
  });
  registry.Register("param_sum", [](rref::RRef<at::Tensor> w) { return w.local_value().sum(); });
  registry.Register("leak_context", [weak](rpc::CallContext& ctx, std::string peer) {
    auto autograd = weak.lock();
    const int64_t id = autograd->NewContext();
    dist_autograd::ContextScope scope(*autograd, id);
    ctx.runtime->RpcSync<at::Tensor>(peer, "chain", at::ones({1, 4}).set_requires_grad(true),
                                     std::vector<std::string>{});
    return id;  // never released
  });
  registry.Register("await_contexts", [weak](int64_t n, int64_t timeout_ms) {
    auto autograd = weak.lock();
    return autograd != nullptr &&
           autograd->WaitForContexts(static_cast<size_t>(n), absl::Milliseconds(timeout_ms));
  });
  return registry;
}

TESSERA_WORKER_SCENARIO(serve_dist_autograd) {
  auto rrefs = rref::RRefContext::Create(MakeDistAutogradClasses());
  auto autograd = dist_autograd::DistAutograd::Create();
  return ServeUntilShutdown(
      "serve_dist_autograd",
      rpc::TryInit(TestWorkerOptions(), MakeDistAutogradRegistry(autograd), {rrefs, autograd}));
}

rpc::Registry DistAutogradWorld::MakeRegistry() { return MakeDistAutogradRegistry(autograd_); }

std::vector<std::shared_ptr<rpc::RuntimeExtension>> DistAutogradWorld::MakeExtensions() {
  return {rrefs_, autograd_};
}

void DistAutogradWorld::ExpectNoContextsAnywhere() {
  EXPECT_TRUE(autograd_->WaitForContexts(0, absl::Seconds(30)))
      << "worker0 holds " << autograd_->num_contexts() << " contexts";
  for (const auto& worker : rt().workers()) {
    if (worker.rank == 0) continue;
    EXPECT_TRUE(rt().RpcSync<bool>(worker.name, "await_contexts", int64_t{0}, int64_t{30000}))
        << worker.name << " still holds distributed autograd contexts";
  }
}

}  // namespace tessera::testing
