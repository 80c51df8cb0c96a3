// Gives a flat process group shared-memory collectives where its ranks
// share hosts (collectives/shm/hierarchical_process_group.h). Backends' factories
// call it; the leaders' group is made by the backend's own `connect`.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "store/store_client.h"

namespace tessera::collectives {

struct ShmCollectivesOptions {
  // Off: the flat group is returned as it is. TESSERA_SHM_COLLECTIVES=0
  // or 1 overrides this field.
  bool enabled = true;
  // Bytes of each rank's two slots; 0 picks ShmCommunicator::kDefaultSlotBytes.
  size_t slot_bytes = 0;
};

// The option field as TESSERA_SHM_COLLECTIVES overrides it; an unknown
// value is an error naming the accepted ones.
absl::StatusOr<bool> ShmCollectivesEnabled(bool configured);

// Makes one leader group: `rank` of `size`, its keys under `store_prefix`.
using ConnectGroup = std::function<absl::StatusOr<std::unique_ptr<ProcessGroup>>(
    int rank, int size, const std::string& store_prefix)>;

// Meets the other ranks through `store` under `store_prefix` (bounded by
// `connect_timeout`): publishes this process's host identity, makes and
// attaches this host's segment, agrees with every rank on whether all
// hosts could (if any could not, every rank keeps `flat`, with a warning
// naming why), and connects the hosts' leaders when there are several
// hosts. Returns `flat` itself when no host has two ranks or `options`
// turn it off. `timeout` bounds each collective.
absl::StatusOr<std::unique_ptr<ProcessGroup>> WithSharedMemory(
    std::unique_ptr<ProcessGroup> flat, store::StoreClient* store, const std::string& store_prefix,
    const ShmCollectivesOptions& options, absl::Duration timeout, absl::Duration connect_timeout,
    const ConnectGroup& connect_leaders);

}  // namespace tessera::collectives
