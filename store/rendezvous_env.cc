#include "store/rendezvous_env.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::store {
namespace {

absl::Status ReadInt(const char* name, int* parsed) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, " is not set (run under tessera-run)"));
  }
  if (!absl::SimpleAtoi(value, parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value, "' is not an integer"));
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

}  // namespace tessera::store
