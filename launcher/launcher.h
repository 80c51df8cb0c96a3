// tessera-run: starts and supervises the local workers of a job, like
// torchrun.
//
// The launcher of node 0 hosts the rendezvous store at MASTER_ADDR:
// MASTER_PORT (--standalone picks a free port on 127.0.0.1), so workers
// always connect to it (TESSERA_STORE_HOSTED=1 tells Tessera's runtimes).
// Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT; its output is prefixed with "[rank N] ".
// SIGINT/SIGTERM are forwarded to the workers. When a worker fails, the
// others are stopped and the group is restarted (up to --max_restarts) or
// the launcher exits non-zero naming the rank and its exit code — unless
// the worker's role is elastic (--elastic_roles): then it restarts alone
// and the job runs on (launcher/elastic_restarts.h). With
// several nodes, a failure on any node restarts the workers of every node
// (launcher/node_coordinator.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;     // the nodes the job starts with (--nnodes N, or the MAX of MIN:MAX)
  int min_nodes = 1;  // fewer live nodes than this stop the job (the MIN of MIN:MAX)
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  // How long a node waits for the others (multi-node restarts, and node 0
  // for the others to finish before it closes the store); the workers get
  // it too (TESSERA_RDZV_TIMEOUT_S, store/rendezvous_env.h), for their
  // rendezvous and the store's answers.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // How long a node may go unheard (its heartbeats through the store)
  // before it is declared lost (see Note [Lost nodes], launcher/node_coordinator.h).
  absl::Duration node_timeout = absl::Seconds(60);
  // How long stopped workers get between SIGTERM and SIGKILL.
  absl::Duration stop_grace = absl::Seconds(5);
  // Roles whose workers restart alone (comma-separated; see Note [Restarting a
  // rank alone], launcher/elastic_restarts.h), each rank up to max_restarts.
  std::string elastic_roles;
  // Join a running job (at master_addr:master_port) with nproc_per_node
  // more workers, on ranks beyond the job's; hosts nothing.
  bool join = false;
  // The most ranks the job may have, joined ones included (0: no bound);
  // tessera-run --join beyond it is refused.
  int max_ranks = 0;
  // An etcd cluster as the store (etcd://..., store/store_url.h) instead
  // of node 0's built-in one; empty for the built-in store.
  std::string store_url;
  // Where workers write their traces (TESSERA_TRACE; see Note [Tracing],
  // common/trace.h); empty: as the environment says.
  std::string trace_dir;
  // Give the workers glibc malloc thresholds fit for training (see Note
  // [Worker malloc settings], launcher/malloc_settings.h).
  bool tune_malloc = true;
  std::vector<std::string> command;  // program and its arguments
};

// Parses tessera-run's command line into its Abseil flags (once per
// process): flags up to the program, the program and its arguments after.
// Exits 2 on an unknown flag (naming the nearest); --help lists the flags.
absl::StatusOr<LaunchOptions> ParseArgs(int argc, char** argv);

// Runs the job; returns the launcher's exit code (0 when every worker
// exited 0).
int Run(const LaunchOptions& options);

}  // namespace tessera::launcher
