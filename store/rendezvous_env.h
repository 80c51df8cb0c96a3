// The env:// rendezvous of torch.distributed, as tessera-run sets it up:
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Read by the RPC
// runtime's and the process groups' FromEnv factories.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::store {

// The variable that carries the job's rendezvous budget, in seconds.
inline constexpr char kRendezvousTimeoutVariable[] = "TESSERA_RDZV_TIMEOUT_S";

struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  // This process's index on its machine (LOCAL_RANK); RANK when unset.
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // TESSERA_STORE_HOSTED=1: a launcher (or test) hosts the store; without
  // it, rank 0 does, as torch's env:// has it.
  bool store_hosted = false;
  // TESSERA_STORE: the store's address when it is not the built-in one at
  // MASTER_ADDR:MASTER_PORT (etcd://..., store/store_url.h); empty if not.
  std::string store_url;
  // TESSERA_RDZV_TIMEOUT_S: the job's rendezvous budget (tessera-run
  // --rdzv_timeout), which workers wait for one another and for the store's
  // answers within (see Note [Slow is not failed], store_backend.h); unset: the
  // worker's own default.
  std::optional<absl::Duration> rendezvous_timeout;

  // Where the store is: store_url, or MASTER_ADDR:MASTER_PORT.
  std::string StoreAddress() const;
};

// Reads the variables; a missing or non-integer one is an error naming it.
// Under srun (one process per task, no launcher), Slurm's stand in for
// those not set: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the first
// host of SLURM_JOB_NODELIST as MASTER_ADDR (store/slurm_env.h).
absl::StatusOr<RendezvousEnv> ReadRendezvousEnv();

}  // namespace tessera::store
