// RPC options for benchmark worker `rank` of `world_size`, meeting through
// the store that rank 0 hosts on `port` (see two_processes.h), with timeouts
// long enough for any benchmark, and a job secret (as tessera-run gives
// every job), so connections pay for the handshake as in real jobs.
#pragma once

#include <string>

#include "rpc/rpc_options.h"

namespace tessera::bench {

inline rpc::RpcOptions WorkerOptions(int rank, int world_size, int port) {
  rpc::RpcOptions options;
  options.name = "worker" + std::to_string(rank);
  options.rank = rank;
  options.world_size = world_size;
  options.master_port = port;
  options.store_role = rpc::StoreRole::kConnect;
  options.default_call_timeout = absl::Minutes(10);
  options.shutdown_timeout = absl::Minutes(10);
  // Both ranks derive the same secret from the store's port; a benchmark on
  // loopback needs only that they agree.
  options.job_secret = rpc::JobSecret("tessera-bench-" + std::to_string(port));
  return options;
}

}  // namespace tessera::bench
