// DistAutogradWorld: RpcWorld whose workers (rank 0 here, the children in
// the "serve_dist_autograd" scenario) carry an RRefContext and DistAutograd,
// and serve small differentiable functions over a parameter per worker.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "dist_autograd/dist_autograd.h"
#include "rref/remote.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {

// The parameter worker `rank` uses in "chain" (a fresh leaf each call, so
// tests can build the same computation locally).
at::Tensor ParamFor(int64_t rank);

// One stage of the chain: tanh(x @ w).
at::Tensor Stage(const at::Tensor& x, const at::Tensor& w);

// An object holding a parameter (ParamFor(seed)), for RRef method calls.
class Affine {
 public:
  explicit Affine(int64_t seed) : weight_(ParamFor(seed)) {}
  at::Tensor Forward(at::Tensor x) { return Stage(x, weight_); }
  // The gradient of the weight in a context ([] if it has none).
  std::vector<at::Tensor> Grad(int64_t context_id);
  static void SetAutograd(std::shared_ptr<dist_autograd::DistAutograd> autograd);

 private:
  at::Tensor weight_;
};

// Functions served by every worker:
//   chain(x, rest): y = Stage(x, own param); if rest is non-empty, returns
//     chain(y, rest[1:]) on worker rest[0] (a nested sync call), else y.
//   chain_async(x, rest): the same through an asynchronous nested call.
//   param_grad(context) -> [gradient of this worker's parameter] or [].
//   throwing(x) -> a copy of x whose backward throws "deliberate failure".
//   leak_context(peer): opens a context here, calls chain on `peer` in it
//     and never releases it.
//   await_contexts(n, timeout_ms) -> whether this worker holds n contexts.
//   new_param(values, shape) -> a leaf that requires grad (for remote()).
//   apply_stage(x, w) -> Stage(x, w) with w an RRef owned here.
//   param_sum(w) -> w.sum() with w an RRef owned here.
// Classes: Affine, the DistributedOptimizer's LocalOptimizer, and pipeline::Stage
// and pipeline::PlanWorker with the models of tests/pipeline/test_stages.h (and
// the loss "mse" for PlanWorker).
rpc::Registry MakeDistAutogradRegistry(std::shared_ptr<dist_autograd::DistAutograd> autograd);
rref::ClassRegistry MakeDistAutogradClasses();

class DistAutogradWorld : public RpcWorld {
 protected:
  std::string ChildScenario() const override { return "serve_dist_autograd"; }
  rpc::Registry MakeRegistry() override;
  std::vector<std::shared_ptr<rpc::RuntimeExtension>> MakeExtensions() override;

  // Every worker, this one included, ends up holding no context.
  void ExpectNoContextsAnywhere();

  std::shared_ptr<rref::RRefContext> rrefs_ =
      rref::RRefContext::Create(MakeDistAutogradClasses());
  std::shared_ptr<dist_autograd::DistAutograd> autograd_ =
      dist_autograd::DistAutograd::Create();
};

}  // namespace tessera::testing
