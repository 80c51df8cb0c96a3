// RPC options for benchmark worker `rank` of `world_size`, meeting through
// the store on `port` (see two_processes.h), with timeouts long enough for
// any benchmark, and the benchmarks' job secret. TESSERA_WORKER_SPIN_US is
// honoured as RpcOptions::FromEnv does, to measure the pool's polling.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "bench/two_processes.h"
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
  options.job_secret = BenchJobSecret();
  if (const char* spin_us = std::getenv("TESSERA_WORKER_SPIN_US")) {
    int64_t us = 0;
    if (!absl::SimpleAtoi(spin_us, &us) || us < 0) {
      std::fprintf(stderr, "TESSERA_WORKER_SPIN_US is '%s' (expected a count, 0 or more)\n",
                   spin_us);
      std::exit(2);
    }
    options.worker_thread_spin = absl::Microseconds(us);
  }
  return options;
}

}  // namespace tessera::bench
