#include "dist_optim/local_optimizer.h"

#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "checkpoint/optimizer_state.h"
#include "common/status.h"
#include "common/trace.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/optimizer_options.h"
#include "dist_optim/parameter_guard.h"
#include "rpc/runtime.h"

namespace tessera::dist_optim {

LocalOptimizer::LocalOptimizer(std::vector<rref::RRef<at::Tensor>> params, std::string kind,
                               std::map<std::string, double> options) {
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor value;
    try {
      value = params[i].local_value();
    } catch (const StatusError& e) {
      throw StatusError(Annotate(e.status(), absl::StrCat("parameter ", i)));
    }
    if (!value.requires_grad() || !value.is_leaf()) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "parameter ", i, " is not a leaf tensor that requires grad")));
    }
    params_.push_back(std::move(value));
  }
  optimizer_ = ValueOrThrow(MakeOptimizer({std::move(kind), std::move(options)}, params_));
}

LocalOptimizer::~LocalOptimizer() = default;

absl::Status LocalOptimizer::Step(rpc::CallContext& ctx, int64_t context_id) {
  trace::Span span = trace::Span::Begin(trace::Track::kOptimizer, "optimizer", "optimizer step");
  span.Arg("context", context_id);
  auto grads = dist_autograd::DistAutograd::Of(*ctx.runtime).GetGradients(context_id);
  ParameterGuard guard(params_);
  // LibTorch's optimizers read .grad: lend them the context's gradients for
  // the step only (distributed backward never writes .grad itself).
  for (auto& param : params_) {
    param.mutable_grad() = grads.contains(param) ? grads.at(param) : at::Tensor();
  }
  absl::Status status;
  try {
    optimizer_->step();
  } catch (const std::exception& e) {
    status = absl::InternalError(std::string("optimizer step failed: ") + e.what());
  }
  for (auto& param : params_) param.mutable_grad() = at::Tensor();
  return status;
}

at::Tensor LocalOptimizer::State() {
  ParameterGuard guard(params_);
  return checkpoint::SaveOptimizerState(*optimizer_);
}

absl::Status LocalOptimizer::LoadState(at::Tensor state) {
  ParameterGuard guard(params_);
  return StatusOf([&] { checkpoint::LoadOptimizerState(*optimizer_, state); });
}

void RegisterLocalOptimizer(rref::ClassRegistry& classes) {
  classes.Class<LocalOptimizer>(LocalOptimizer::kClassName)
      .Constructor<std::vector<rref::RRef<at::Tensor>>, std::string,
                   std::map<std::string, double>>()
      .Method("num_params", &LocalOptimizer::NumParams)
      .Method("step", &LocalOptimizer::Step)
      .Method("state", &LocalOptimizer::State)
      .Method("load_state", &LocalOptimizer::LoadState);
}

}  // namespace tessera::dist_optim
