#include "dist_optim/distributed_optimizer.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
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

absl::StatusOr<DistributedOptimizer> DistributedOptimizer::Create(
    rref::RRefContext& rrefs, const std::vector<rref::RRef<at::Tensor>>& params,
    const OptimizerOptions& options, absl::Duration timeout) {
  if (params.empty()) return absl::InvalidArgumentError("DistributedOptimizer: no parameters");
  // Owners in first-appearance order, each with its parameters in order.
  std::vector<std::string> owners;
  std::map<std::string, std::vector<rref::RRef<at::Tensor>>> by_owner;
  for (const auto& param : params) {
    if (!param.valid()) return absl::InvalidArgumentError("DistributedOptimizer: empty RRef");
    auto& list = by_owner[param.owner_name()];
    if (list.empty()) owners.push_back(param.owner_name());
    list.push_back(param);
  }
  const WireOptions wire = ToWire(options);
  DistributedOptimizer optimizer;
  std::vector<Future<int64_t>> created;
  try {
    for (const auto& owner : owners) {
      optimizer.optimizers_.push_back(rref::RemoteObject<LocalOptimizer>(
          rrefs, owner, by_owner[owner], wire.kind, wire.values));
      created.push_back(OnOwner(optimizer.optimizers_.back().RpcAsync<int64_t>("num_params"),
                                "DistributedOptimizer: creating the local optimizer", owner));
    }
  } catch (const StatusError& e) {
    return Annotate(e.status(), "DistributedOptimizer: register the owner side with "
                                "dist_optim::RegisterLocalOptimizer(classes)");
  }
  TESSERA_RETURN_IF_ERROR(WhenAllOk(created).Wait(timeout).status());
  return optimizer;
}

absl::Status DistributedOptimizer::Step(int64_t context_id, absl::Duration timeout) const {
  const std::string what = absl::StrCat("DistributedOptimizer: step of context ", context_id);
  std::vector<Future<std::monostate>> steps;
  for (const auto& local : optimizers_) {
    steps.push_back(OnOwner(local.RpcAsync<void>("step", context_id), what, local.owner_name()));
  }
  return WhenAllOk(steps).Wait(timeout).status();
}

}  // namespace tessera::dist_optim
