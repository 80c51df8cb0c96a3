// The env:// rendezvous of torch.distributed, as tessera-run sets it up:
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Shared by the
// process-group backends' FromEnv factories.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddp/process_group.h"
#include "store/store_client.h"

namespace tessera::ddp {

struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  // This process's index on its machine (LOCAL_RANK); RANK when unset.
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// Reads the variables; a missing or non-integer one is an error naming it.
absl::StatusOr<RendezvousEnv> ReadRendezvousEnv();

// A group and the store connection it was made with (keep both alive).
struct EnvProcessGroup {
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<ProcessGroup> group;
};

using ProcessGroupFactory = std::function<absl::StatusOr<std::unique_ptr<ProcessGroup>>(
    store::StoreClient* store, int rank, int size)>;

// Reads the environment, connects to its store and makes the group with
// `create`.
absl::StatusOr<EnvProcessGroup> CreateProcessGroupFromEnv(const ProcessGroupFactory& create);

}  // namespace tessera::ddp
