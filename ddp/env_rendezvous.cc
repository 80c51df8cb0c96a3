#include "ddp/env_rendezvous.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::ddp {
namespace {

absl::Status ReadInt(const char* name, int* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || !absl::SimpleAtoi(text, value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, " is missing or not an integer (run under tessera-run)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RendezvousEnv> ReadRendezvousEnv() {
  RendezvousEnv env;
  for (auto [name, value] : {std::pair{"RANK", &env.rank}, std::pair{"WORLD_SIZE", &env.world_size},
                             std::pair{"MASTER_PORT", &env.master_port}}) {
    if (auto status = ReadInt(name, value); !status.ok()) return status;
  }
  env.local_rank = env.rank;
  if (std::getenv("LOCAL_RANK") != nullptr) {
    if (auto status = ReadInt("LOCAL_RANK", &env.local_rank); !status.ok()) return status;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr) env.master_addr = addr;
  return env;
}

absl::StatusOr<EnvProcessGroup> CreateProcessGroupFromEnv(const ProcessGroupFactory& create) {
  auto env = ReadRendezvousEnv();
  if (!env.ok()) return env.status();
  EnvProcessGroup result;
  result.store = std::make_unique<store::StoreClient>(env->master_addr, env->master_port);
  auto group = create(result.store.get(), env->rank, env->world_size);
  if (!group.ok()) return group.status();
  result.group = *std::move(group);
  return result;
}

}  // namespace tessera::ddp
