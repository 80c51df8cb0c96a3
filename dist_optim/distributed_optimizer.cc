#include "dist_optim/distributed_optimizer.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/status.h"
#include "common/trace.h"
#include "rref/remote.h"

namespace tessera::dist_optim {
namespace {

// `call`, with its error annotated with what it was and the owner it ran on.
template <typename T>
Future<T> OnOwner(Future<T> call, std::string what, std::string owner) {
  return call.Then([what = std::move(what), owner = std::move(owner)](
                       const absl::StatusOr<T>& result) -> absl::StatusOr<T> {
    if (!result.ok()) {
      return Annotate(result.status(), what + " on parameter owner '" + owner + "'");
    }
    return result;
  });
}

}  // namespace

DistributedOptimizer DistributedOptimizer::Create(rref::RRefContext& rrefs,
                                                  const std::vector<rref::RRef<at::Tensor>>& params,
                                                  const OptimizerOptions& options,
                                                  const rpc::CallOptions& call) {
  auto fail = [](absl::Status status) { throw StatusError(std::move(status)); };
  if (params.empty()) fail(absl::InvalidArgumentError("DistributedOptimizer: no parameters"));
  // Owners in first-appearance order, each with its parameters in order.
  std::vector<std::string> owners;
  std::map<std::string, std::vector<rref::RRef<at::Tensor>>> by_owner;
  for (const auto& param : params) {
    if (!param.valid()) fail(absl::InvalidArgumentError("DistributedOptimizer: empty RRef"));
    auto& list = by_owner[param.owner_name()];
    if (list.empty()) owners.push_back(param.owner_name());
    list.push_back(param);
  }
  const WireOptions wire = ToWire(options);
  DistributedOptimizer optimizer;
  optimizer.rrefs_ = &rrefs;
  std::vector<Future<int64_t>> created;
  try {
    for (const auto& owner : owners) {
      optimizer.optimizers_.push_back(rref::RemoteObject<LocalOptimizer>(
          rrefs, owner, by_owner[owner], wire.kind, wire.values));
      created.push_back(OnOwner(optimizer.optimizers_.back().RpcAsync<int64_t>(call, "num_params"),
                                "DistributedOptimizer: creating the local optimizer", owner));
    }
  } catch (const StatusError& e) {
    fail(Annotate(e.status(),
                  "DistributedOptimizer: register the owner side with "
                  "dist_optim::RegisterLocalOptimizer(classes)"));
  }
  ValueOrThrow(AwaitCall(WhenAllOk(created), rrefs.EffectiveTimeout(call)));
  return optimizer;
}

Future<bool> DistributedOptimizer::StepAsync(int64_t context_id,
                                             const rpc::CallOptions& options) const {
  const std::string what = absl::StrCat("DistributedOptimizer: step of context ", context_id);
  std::vector<Future<std::monostate>> steps;
  for (const auto& local : optimizers_) {
    steps.push_back(
        OnOwner(local.RpcAsync<void>(options, "step", context_id), what, local.owner_name()));
  }
  return WhenAllOk(steps);
}

std::vector<at::Tensor> DistributedOptimizer::SaveState(const rpc::CallOptions& options) const {
  std::vector<at::Tensor> states;
  for (const auto& local : optimizers_) {
    states.push_back(local.RpcSync<at::Tensor>(options, "state"));
  }
  return states;
}

void DistributedOptimizer::LoadState(const std::vector<at::Tensor>& states,
                                     const rpc::CallOptions& options) const {
  if (states.size() != optimizers_.size()) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("DistributedOptimizer: ", states.size(), " saved states for ",
                     optimizers_.size(), " owners")));
  }
  for (size_t i = 0; i < states.size(); ++i) {
    optimizers_[i].RpcSync<void>(options, "load_state", states[i]);
  }
}

void DistributedOptimizer::Step(int64_t context_id, const rpc::CallOptions& options) const {
  trace::Span span =
      trace::Span::Begin(trace::Track::kOptimizer, "optimizer", "distributed optimizer step");
  span.Arg("context", context_id);
  ValueOrThrow(AwaitCall(StepAsync(context_id, options), rrefs_->EffectiveTimeout(options)));
}

}  // namespace tessera::dist_optim
