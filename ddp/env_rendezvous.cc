#include "ddp/env_rendezvous.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "ddp/collective_checks.h"
#include "ddp/traced_process_group.h"
#include "store/store_url.h"

namespace tessera::ddp {

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
  auto env = store::ReadRendezvousEnv();
  if (!env.ok()) return env.status();
  auto checked = CollectiveChecksFromEnv();
  if (!checked.ok()) return checked.status();
  auto secret = auth::JobSecret::FromEnv();
  if (!secret.ok()) return secret.status();
  EnvProcessGroup result;
  if (env->rank == 0 && !env->store_hosted && env->store_url.empty()) {
    auto server = store::StoreServer::StartForMaster(env->master_addr, env->master_port, *secret);
    if (!server.ok()) return server.status();
    result.store_server = *std::move(server);
  }
  auto store = store::ConnectStore(env->StoreAddress(), absl::Seconds(60), *std::move(secret));
  if (!store.ok()) return store.status();
  result.store = *std::move(store);
  auto group = create(result.store.get(), *env);
  if (!group.ok()) return group.status();
  result.group = *std::move(group);
  if (*checked) result.group = WithCollectiveChecks(std::move(result.group), timeout);
  result.group = WithTracing(std::move(result.group));
  return result;
}

}  // namespace tessera::ddp
