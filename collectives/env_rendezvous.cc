#include "collectives/env_rendezvous.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/collective_checks.h"
#include "common/status.h"
#include "store/store_url.h"

namespace tessera::collectives {

absl::StatusOr<bool> CollectiveChecksFromEnv() {
  const char* value = std::getenv("TESSERA_DISTRIBUTED_DEBUG");
  const std::string level = value == nullptr ? "" : value;
  if (level.empty() || level == "OFF") return false;
  if (level == "DETAIL") return true;
  return absl::InvalidArgumentError(
      absl::StrCat("TESSERA_DISTRIBUTED_DEBUG='", level, "' is not one of OFF, DETAIL"));
}

absl::StatusOr<EnvProcessGroup> CreateProcessGroupFromEnv(const ProcessGroupFactory& create,
                                                          absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(auto env, store::ReadRendezvousEnv());
  TESSERA_ASSIGN_OR_RETURN(auto checked, CollectiveChecksFromEnv());
  TESSERA_ASSIGN_OR_RETURN(auto secret, auth::JobSecret::FromEnv());
  EnvProcessGroup result;
  if (env.rank == 0 && !env.store_hosted && env.store_url.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        auto server, store::StoreServer::StartForMaster(env.master_addr, env.master_port, secret));
    result.store_server = std::move(server);
  }
  auto store = store::ConnectStore(env.StoreAddress(), absl::Seconds(60), std::move(secret));
  if (!store.ok()) return store.status();
  result.store = *std::move(store);
  auto group = create(result.store.get(), env);
  if (!group.ok()) return group.status();
  result.group = *std::move(group);
  if (checked) result.group = WithCollectiveChecks(std::move(result.group), timeout);
  result.group = WithTracing(std::move(result.group));
  return result;
}

}  // namespace tessera::collectives
