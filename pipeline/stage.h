// Pipeline stages: one part of a model, living on its own worker as an
// object created with remote(), fed by the previous stage's output RRef.
//
//   pipeline::RegisterStage(worker->rrefs().classes(), {{"front", MakeFront}, {"back", MakeBack}});
//   ... on the driver:
//   auto front = worker->RemoteObject<pipeline::Stage>("stage1", std::string("front"), seed);
//
// A stage's model comes from a factory registered on its worker under a
// name (models are code, not data: nothing but the name and a seed travel).
// Every worker that may host a stage registers the same names.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/activation_stash.h"
#include "rpc/call_context.h"
#include "rref/class_registry.h"
#include "rref/rref.h"

namespace tessera::pipeline {

// A stage's part of the model: its parameters (leaves requiring grad) and
// its forward function over them.
struct StageModel {
  std::vector<at::Tensor> parameters;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::shared_ptr<void> keep_alive;  // e.g. the torch::nn::Module owning them
};

using StageFactory = std::function<StageModel(int64_t seed)>;

class Stage : public std::enable_shared_from_this<Stage> {
 public:
  explicit Stage(StageModel model) : model_(std::move(model)) {}

  // Fetches `input` (the previous stage's output, or a micro-batch the
  // driver owns) and runs the model on it. Inside a distributed autograd
  // context both the fetch and the result are recorded, so backward flows
  // from the next stage through here to the previous one. Asynchronous: no
  // server thread waits for the fetch (with many micro-batches in flight,
  // blocked threads would starve the pool that completes the fetches).
  Future<at::Tensor> Forward(rref::RRef<at::Tensor> input);
  // The model on a tensor sent with the call (a remote module, as PyTorch's
  // RemoteModule: recorded by distributed autograd like any call).
  at::Tensor Apply(at::Tensor input) { return model_.forward(input); }

  // The scheduled path (see Note [Pipeline schedules], schedule.h), in the
  // driver's distributed autograd context: TrainForward runs micro-batch
  // `micro` and keeps its graph here (returning the output detached, so no
  // graph crosses the wire); TrainBackward takes the gradient of that
  // output, runs the micro-batch's backward here, frees its graph, adds the
  // parameters' gradients to the context and returns the input's gradient
  // (an empty tensor unless `input_gradient`). Both asynchronous.
  Future<at::Tensor> TrainForward(rpc::CallContext& ctx, rref::RRef<at::Tensor> input,
                                  int64_t micro, bool input_gradient);
  Future<at::Tensor> TrainBackward(rpc::CallContext& ctx, rref::RRef<at::Tensor> output_gradient,
                                   int64_t micro, bool input_gradient);
  // {micro-batches whose activations are kept now, the most kept at once};
  // with reset, the peak starts again from now.
  std::vector<int64_t> Activations(bool reset);

  // The model's parameters as RRefs owned here (for a DistributedOptimizer).
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs(rpc::CallContext& ctx);
  // The gradients the parameters accumulated in a distributed autograd
  // context, in parameter order (zeros where none).
  std::vector<at::Tensor> Gradients(rpc::CallContext& ctx, int64_t context_id);
  // The parameters' current values (copies).
  std::vector<at::Tensor> ParameterValues();

 private:
  StageModel model_;
  ActivationStash stash_;
};

// Registers Stage as "tessera.pipeline.Stage", constructed remotely from
// (factory name, seed). An unknown name fails the remote() naming it.
void RegisterStage(rref::ClassRegistry& classes, std::map<std::string, StageFactory> factories);

}  // namespace tessera::pipeline
