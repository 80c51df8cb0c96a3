#include "ddp/env_rendezvous.h"

namespace tessera::ddp {

absl::StatusOr<EnvProcessGroup> CreateProcessGroupFromEnv(const ProcessGroupFactory& create) {
  auto env = store::ReadRendezvousEnv();
  if (!env.ok()) return env.status();
  EnvProcessGroup result;
  result.store = std::make_unique<store::StoreClient>(env->master_addr, env->master_port);
  auto group = create(result.store.get(), *env);
  if (!group.ok()) return group.status();
  result.group = *std::move(group);
  return result;
}

}  // namespace tessera::ddp
