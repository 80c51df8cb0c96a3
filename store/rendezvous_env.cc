#include "store/rendezvous_env.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_address.h"
#include "common/status.h"
#include "store/slurm_env.h"

namespace tessera::store {
namespace {

// Reads `name`, or else Slurm's `slurm_name` (srun with one process per
// task sets those, and nothing else).
absl::Status ReadInt(const char* name, int* parsed, const char* slurm_name = nullptr) {
  const char* value = std::getenv(name);
  if (value == nullptr && slurm_name != nullptr) value = std::getenv(slurm_name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name,
                                                   " is not set (run under tessera-run, or srun)"));
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
  if (auto status = ReadInt("RANK", &env.rank, "SLURM_PROCID"); !status.ok()) return status;
  if (auto status = ReadInt("WORLD_SIZE", &env.world_size, "SLURM_NTASKS"); !status.ok()) {
    return status;
  }
  if (auto status = ReadInt("MASTER_PORT", &env.master_port); !status.ok()) return status;
  env.local_rank = env.rank;
  if (std::getenv("LOCAL_RANK") != nullptr || std::getenv("SLURM_LOCALID") != nullptr) {
    if (auto status = ReadInt("LOCAL_RANK", &env.local_rank, "SLURM_LOCALID"); !status.ok()) {
      return status;
    }
  }
  if (const char* url = std::getenv("TESSERA_STORE"); url != nullptr) env.store_url = url;
  if (std::getenv(kRendezvousTimeoutVariable) != nullptr) {
    int seconds = 0;
    if (auto status = ReadInt(kRendezvousTimeoutVariable, &seconds); !status.ok()) return status;
    if (seconds <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ",
                                                     kRendezvousTimeoutVariable, "='", seconds,
                                                     "' is not a number of seconds, 1 or more"));
    }
    env.rendezvous_timeout = absl::Seconds(seconds);
  }
  const char* hosted = std::getenv("TESSERA_STORE_HOSTED");
  env.store_hosted = hosted != nullptr && std::string(hosted) == "1";
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr) {
    env.master_addr = addr;
  } else {
    TESSERA_ASSIGN_OR_RETURN(auto slurm, SlurmMasterHost());
    if (slurm.has_value()) env.master_addr = *slurm;
  }
  return env;
}

std::string RendezvousEnv::StoreAddress() const {
  return store_url.empty() ? JoinHostPort(master_addr, master_port) : store_url;
}

}  // namespace tessera::store
