// Process groups made from the env:// rendezvous (store/rendezvous_env.h),
// as tessera-run sets it up. Shared by the backends' FromEnv factories.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "collectives/process_group.h"
#include "store/rendezvous_env.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::collectives {

// A group and the store connection it was made with (keep both alive).
struct EnvProcessGroup {
  // Rank 0's store, when no launcher hosts one (TESSERA_STORE_HOSTED unset:
  // ranks started by Kubernetes or Slurm directly, as torch's env:// does).
  std::unique_ptr<store::StoreServer> store_server;
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<ProcessGroup> group;
};

// Makes a group from a store connection and the environment's ranks.
using ProcessGroupFactory = std::function<absl::StatusOr<std::unique_ptr<ProcessGroup>>(
    store::StoreClient* store, const store::RendezvousEnv& env)>;

// Reads the environment, connects to its store and makes the group with
// `create`; `timeout` is that group's bound on a collective.
// TESSERA_DISTRIBUTED_DEBUG=DETAIL wraps the group in collective checks
// (collectives/collective_checks.h); OFF or unset leaves it unchecked.
absl::StatusOr<EnvProcessGroup> CreateProcessGroupFromEnv(const ProcessGroupFactory& create,
                                                          absl::Duration timeout);

// Whether TESSERA_DISTRIBUTED_DEBUG asks for collective checks; an
// unknown value is an error naming the accepted ones.
absl::StatusOr<bool> CollectiveChecksFromEnv();

}  // namespace tessera::collectives
