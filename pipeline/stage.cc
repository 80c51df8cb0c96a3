#include "pipeline/stage.h"

#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist_autograd/dist_autograd.h"
#include "rref/remote.h"
#include "common/status.h"
#include "common/trace.h"

namespace tessera::pipeline {

namespace {

// Runs the model's code in a continuation, where an exception (a shape
// mismatch in the model, say) has no caller to reach: it becomes the call's
// error.
template <typename Fn>
absl::StatusOr<at::Tensor> Guarded(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", what, " failed: ", e.what()));
  }
}

// The distributed autograd context a scheduled call runs in: its id, and
// the engine holding it (kept alive by the call's continuation).
struct ScheduledContext {
  int64_t id;
  std::shared_ptr<dist_autograd::DistAutograd> autograd;
};

absl::StatusOr<ScheduledContext> ContextOfCall(rpc::CallContext& ctx) {
  auto& autograd = dist_autograd::DistAutograd::Of(*ctx.runtime);
  auto context = autograd.current_context();
  if (!context.has_value()) {
    return absl::FailedPreconditionError(
        "a scheduled pipeline step runs inside a distributed autograd context "
        "(create a dist_autograd::ContextGuard before PipelineDriver::Train)");
  }
  return ScheduledContext{*context, autograd.shared_from_this()};
}

// See Note [Tracing]: one span per micro-batch's forward or backward on a stage.
trace::Span StageSpan(const char* pass, int64_t micro, int64_t context) {
  if (!trace::Enabled()) return {};
  trace::Span span = trace::Span::Begin(trace::Track::kPipeline, "pipeline",
                                        absl::StrCat(pass, " ", micro));
  span.Arg("micro_batch", micro);
  span.Arg("context", context);
  return span;
}

}  // namespace

Future<at::Tensor> Stage::Forward(rref::RRef<at::Tensor> input) {
  return input.to_here_async().Then(
      [forward = model_.forward](
          const absl::StatusOr<at::Tensor>& fetched) -> absl::StatusOr<at::Tensor> {
        if (!fetched.ok()) return fetched.status();
        return Guarded("forward", [&] { return forward(*fetched); });
      });
}

Future<at::Tensor> Stage::TrainForward(rpc::CallContext& ctx, rref::RRef<at::Tensor> input,
                                       int64_t micro, bool input_gradient) {
  auto context = ContextOfCall(ctx);
  if (!context.ok()) return Future<at::Tensor>::Ready(context.status());
  return input.to_here_async().Then(
      [self = shared_from_this(), autograd = context->autograd, context = context->id, micro,
       input_gradient](const absl::StatusOr<at::Tensor>& fetched) -> absl::StatusOr<at::Tensor> {
        if (!fetched.ok()) return fetched.status();
        trace::Span span = StageSpan("forward", micro, context);
        return Guarded("forward", [&] {
          at::Tensor x = fetched->detach();
          if (input_gradient) x.requires_grad_(true);
          at::Tensor output = self->model_.forward(x);
          at::Tensor shipped = output.detach();
          self->stash_.Put(context, micro, {std::move(x), std::move(output)},
                           [autograd](int64_t id) { return autograd->HasContext(id); });
          return shipped;
        });
      });
}

Future<at::Tensor> Stage::TrainBackward(rpc::CallContext& ctx,
                                        rref::RRef<at::Tensor> output_gradient, int64_t micro,
                                        bool input_gradient) {
  auto context = ContextOfCall(ctx);
  if (!context.ok()) return Future<at::Tensor>::Ready(context.status());
  return output_gradient.to_here_async().Then(
      [self = shared_from_this(), autograd = context->autograd, context = context->id, micro,
       input_gradient](const absl::StatusOr<at::Tensor>& grad) -> absl::StatusOr<at::Tensor> {
        if (!grad.ok()) return grad.status();
        std::optional<StashedMicroBatch> kept = self->stash_.Take(context, micro);
        if (!kept.has_value()) {
          return absl::FailedPreconditionError(
              absl::StrCat("backward of micro-batch ", micro, " in context ", context,
                           " before its forward ran here (or after its backward)"));
        }
        if (!grad->sizes().equals(kept->output.sizes())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the gradient for micro-batch ", micro, "'s output has shape ",
              c10::str(grad->sizes()), ", the output ", c10::str(kept->output.sizes())));
        }
        trace::Span span = StageSpan("backward", micro, context);
        std::vector<at::Tensor> wrt = self->model_.parameters;
        if (input_gradient) wrt.push_back(kept->input);
        std::vector<at::Tensor> grads;
        auto ran = Guarded("backward", [&] {
          // Frees the micro-batch's graph (no retain): its activations go here.
          grads = torch::autograd::grad({kept->output}, wrt, {*grad}, /*retain_graph=*/false,
                                        /*create_graph=*/false, /*allow_unused=*/true);
          return at::Tensor();
        });
        if (!ran.ok()) return ran.status();
        TESSERA_RETURN_IF_ERROR(
            autograd->AccumulateGradients(context, self->model_.parameters, grads));
        if (!input_gradient) return at::zeros({0});
        return grads.back().defined() ? grads.back() : at::zeros_like(kept->input);
      });
}

std::vector<int64_t> Stage::Activations(bool reset) {
  std::vector<int64_t> counts = {stash_.live(), stash_.peak()};
  if (reset) stash_.ResetPeak();
  return counts;
}

std::vector<rref::RRef<at::Tensor>> Stage::ParameterRRefs(rpc::CallContext& ctx) {
  return rref::MakeRRefs(ctx, model_.parameters);
}

std::vector<at::Tensor> Stage::Gradients(rpc::CallContext& ctx, int64_t context_id) {
  auto* autograd = &dist_autograd::DistAutograd::Of(*ctx.runtime);
  return autograd->GetGradients(context_id, model_.parameters);
}

std::vector<at::Tensor> Stage::ParameterValues() {
  std::vector<at::Tensor> result;
  for (const auto& parameter : model_.parameters) result.push_back(parameter.detach().clone());
  return result;
}

void RegisterStage(rref::ClassRegistry& classes, std::map<std::string, StageFactory> factories) {
  classes.Class<Stage>("tessera.pipeline.Stage")
      .Factory<std::string, int64_t>([factories = std::move(factories)](std::string name,
                                                                        int64_t seed) {
        auto it = factories.find(name);
        if (it == factories.end()) {
          std::vector<std::string> known;
          for (const auto& [known_name, factory] : factories) known.push_back(known_name);
          throw StatusError(absl::NotFoundError("no pipeline stage model named '" + name +
                                                "' on this worker (known: " +
                                                absl::StrJoin(known, ", ") + ")"));
        }
        return std::make_shared<Stage>(it->second(seed));
      })
      .Method("forward", &Stage::Forward)
      .Method("apply", &Stage::Apply)
      .Method("train_forward", &Stage::TrainForward)
      .Method("train_backward", &Stage::TrainBackward)
      .Method("activations", &Stage::Activations)
      .Method("parameter_rrefs", &Stage::ParameterRRefs)
      .Method("gradients", &Stage::Gradients)
      .Method("parameter_values", &Stage::ParameterValues);
}

}  // namespace tessera::pipeline
