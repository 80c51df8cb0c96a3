// The Gloo group of a benchmark's ranks, meeting through the store that
// RunProcesses (bench/two_processes.h) started on `port`.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/two_processes.h"
#include "collectives/gloo/gloo_process_group.h"
#include "store/store_client.h"

namespace tessera::bench {

struct BenchGlooGroup {
  std::unique_ptr<store::StoreClient> store;  // declared first: outlives the group
  std::unique_ptr<collectives::ProcessGroup> group;
};

inline absl::StatusOr<BenchGlooGroup> ConnectGlooGroup(
    int rank, int port, int world_size, const collectives::GlooOptions& options = {}) {
  BenchGlooGroup connected;
  connected.store =
      std::make_unique<store::StoreClient>("127.0.0.1", port, absl::Seconds(60), BenchJobSecret());
  connected.group =
      collectives::CreateGlooProcessGroup(connected.store.get(), rank, world_size, options);
  return connected;
}

}  // namespace tessera::bench
