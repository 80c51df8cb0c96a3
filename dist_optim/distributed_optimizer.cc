#include "dist_optim/distributed_optimizer.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "rref/remote.h"

namespace tessera::dist_optim {
namespace {

// Waits for all `calls`; the first failure, annotated with its owner.
template <typename T>
absl::Status WaitAll(const std::vector<std::pair<std::string, Future<T>>>& calls,
                     absl::Time deadline, const std::string& what) {
  for (const auto& [owner, call] : calls) {
    auto result = call.Wait(deadline);
    if (!result.ok()) {
      return Annotate(result.status(), what + " on parameter owner '" + owner + "'");
    }
  }
  return absl::OkStatus();
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
  std::vector<std::pair<std::string, Future<int64_t>>> created;
  try {
    for (const auto& owner : owners) {
      optimizer.optimizers_.push_back(rref::RemoteObject<LocalOptimizer>(
          rrefs, owner, by_owner[owner], wire.kind, wire.values));
      created.emplace_back(owner, optimizer.optimizers_.back().RpcAsync<int64_t>("num_params"));
    }
  } catch (const StatusError& e) {
    return Annotate(e.status(), "DistributedOptimizer: register the owner side with "
                                "dist_optim::RegisterLocalOptimizer(classes)");
  }
  TESSERA_RETURN_IF_ERROR(WaitAll(created, absl::Now() + timeout,
                                  "DistributedOptimizer: creating the local optimizer"));
  return optimizer;
}

absl::Status DistributedOptimizer::Step(int64_t context_id, absl::Duration timeout) const {
  std::vector<std::pair<std::string, Future<std::monostate>>> steps;
  for (const auto& local : optimizers_) {
    steps.emplace_back(local.owner_name(), local.RpcAsync<void>("step", context_id));
  }
  return WaitAll(steps, absl::Now() + timeout,
                 absl::StrCat("DistributedOptimizer: step of context ", context_id));
}

}  // namespace tessera::dist_optim
