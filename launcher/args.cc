#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status.h"
#include "launcher/launcher.h"
#include "store/slurm_env.h"
#include "store/store_url.h"

ABSL_FLAG(int, nproc_per_node, 1, "worker processes to start on this node");
ABSL_FLAG(std::string, nnodes, "1",
          "nodes in the job, N or MIN:MAX as torchrun's: the job starts with MAX nodes and goes "
          "on while at least MIN are live (in a Slurm allocation: SLURM_NNODES unless given)");
ABSL_FLAG(int, node_rank, 0, "this node's index, 0..nnodes-1 (Slurm: SLURM_NODEID)");
ABSL_FLAG(std::string, master_addr, "127.0.0.1",
          "host of node 0, where the rendezvous store runs (Slurm: the allocation's "
          "first node)");
ABSL_FLAG(int, master_port, 29500, "port of the rendezvous store on master_addr");
ABSL_FLAG(bool, standalone, false,
          "one node, the store on a free port of 127.0.0.1 (ignores master_addr/port)");
ABSL_FLAG(std::string, store, "",
          "the rendezvous store, when not node 0's built-in one: an etcd cluster, "
          "etcd://h1:2379,h2:2379,h3:2379/<job> (its keys under /tessera/<job>/), so that no "
          "single node's loss ends a fault-tolerant job; also TESSERA_STORE. MASTER_ADDR "
          "defaults to the first endpoint's host");
ABSL_FLAG(int, max_restarts, 0, "times the worker group is restarted after a worker fails");
ABSL_FLAG(std::string, elastic_roles, "",
          "roles (comma-separated, as workers declare them: RpcOptions::role) whose failed "
          "workers restart alone, each rank up to --max_restarts times, while the job runs on");
ABSL_FLAG(bool, join, false,
          "join the running job at --master_addr:--master_port with --nproc_per_node more "
          "workers (ranks beyond the job's); needs the job's TESSERA_JOB_SECRET(_FILE)");
ABSL_FLAG(int, max_ranks, 0,
          "the most ranks the job may have, workers joined with --join included (like the MAX "
          "of torchrun's --nnodes MIN:MAX); 0: no bound");
ABSL_FLAG(int, rdzv_timeout, 300, "seconds a node waits for the others");
ABSL_FLAG(std::string, trace, "",
          "directory where each worker writes its trace, DIR/<worker name>.json (sets "
          "TESSERA_TRACE for the workers; scripts/tessera-trace merges and summarises them)");
ABSL_FLAG(bool, tune_malloc, true,
          "give the workers MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ of 256 MiB, so "
          "that each step's large tensors reuse the heap instead of being mapped and faulted in "
          "afresh; not when the environment already sets malloc up (either variable, or "
          "GLIBC_TUNABLES with glibc.malloc)");
ABSL_FLAG(int, node_timeout, 60,
          "seconds a node may be silent (no heartbeat through the store) before it is declared "
          "lost: the job goes on without it if --nnodes MIN allows and its workers' roles are "
          "elastic, and stops naming it otherwise");

namespace tessera::launcher {

namespace {

constexpr char kUsage[] =
    "tessera-run [flags] program [program's arguments...]\n\n"
    "Starts and supervises this node's workers of a Tessera job, like torchrun:\n"
    "each gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT; a failed worker stops the group, which restarts up to\n"
    "--max_restarts times; workers of --elastic_roles restart alone. Examples:\n"
    "  tessera-run --standalone --nproc_per_node 3 ./parameter_server --epochs 1\n"
    "  tessera-run --master_port 29500 --nproc_per_node 3 --elastic_roles trainer \\\n"
    "      --max_restarts 3 ./parameter_server --epochs 1\n"
    "  tessera-run --join --master_port 29500 ./parameter_server --epochs 1";

// Inside a Slurm allocation (one tessera-run per node, e.g. `srun
// --ntasks-per-node 1 tessera-run ...`), what the command line leaves out
// comes from Slurm: the node count, this node's index, and the first node
// of the allocation as the master.
absl::Status ApplySlurmDefaults(const std::set<std::string>& given, LaunchOptions* options) {
  if (options->standalone || std::getenv("SLURM_JOB_ID") == nullptr) return absl::OkStatus();
  if (!given.count("nnodes")) {
    if (auto nodes = store::SlurmInt("SLURM_JOB_NUM_NODES")) options->nnodes = *nodes;
    if (auto nodes = store::SlurmInt("SLURM_NNODES")) options->nnodes = *nodes;
    options->min_nodes = options->nnodes;
  }
  if (!given.count("node_rank")) {
    if (auto node = store::SlurmInt("SLURM_NODEID")) options->node_rank = *node;
  }
  if (!given.count("master_addr")) {
    TESSERA_ASSIGN_OR_RETURN(auto master, store::SlurmMasterHost());
    if (master.has_value()) options->master_addr = *master;
  }
  return absl::OkStatus();
}

// "3" -> 3 nodes, none may be lost; "2:3" -> 3 nodes, down to 2.
absl::Status ParseNodeCount(const std::string& text, LaunchOptions* options) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  int min = 0, max = 0;
  bool ok = false;
  if (parts.size() == 1) {
    ok = absl::SimpleAtoi(parts[0], &max);
    min = max;
  } else if (parts.size() == 2) {
    ok = absl::SimpleAtoi(parts[0], &min) && absl::SimpleAtoi(parts[1], &max);
  }
  if (!ok || min < 1 || min > max) {
    return absl::InvalidArgumentError("--nnodes takes N or MIN:MAX (1 <= MIN <= MAX), not '" +
                                      text + "'");
  }
  options->nnodes = max;
  options->min_nodes = min;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseArgs(int argc, char** argv) {
  LaunchOptions options;
  const ParsedFlags parsed = ParseFlags(argc, argv, kUsage, Positionals::kStopAtProgram);
  options.command = parsed.positional;
  options.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  if (auto nodes = ParseNodeCount(absl::GetFlag(FLAGS_nnodes), &options); !nodes.ok()) {
    return nodes;
  }
  options.node_rank = absl::GetFlag(FLAGS_node_rank);
  options.master_addr = absl::GetFlag(FLAGS_master_addr);
  options.master_port = absl::GetFlag(FLAGS_master_port);
  options.standalone = absl::GetFlag(FLAGS_standalone);
  options.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options.rendezvous_timeout = absl::Seconds(absl::GetFlag(FLAGS_rdzv_timeout));
  options.node_timeout = absl::Seconds(absl::GetFlag(FLAGS_node_timeout));
  options.elastic_roles = absl::GetFlag(FLAGS_elastic_roles);
  options.join = absl::GetFlag(FLAGS_join);
  options.max_ranks = absl::GetFlag(FLAGS_max_ranks);
  options.store_url = absl::GetFlag(FLAGS_store);
  options.trace_dir = absl::GetFlag(FLAGS_trace);
  options.tune_malloc = absl::GetFlag(FLAGS_tune_malloc);
  if (const char* url = std::getenv("TESSERA_STORE"); options.store_url.empty() && url != nullptr) {
    options.store_url = url;
  }
  if (!options.store_url.empty()) {
    auto store = store::ParseStoreUrl(options.store_url);
    if (!store.ok())
      return absl::InvalidArgumentError(absl::StrCat("--store: ", store.status().message()));
    if (!store->etcd) {
      return absl::InvalidArgumentError(
          "--store takes etcd://...; the built-in store is node 0's, at --master_addr and "
          "--master_port");
    }
    if (!parsed.given.count("master_addr") && !options.standalone) {
      options.master_addr = store->host;
    }
  }
  if (options.command.empty()) return absl::InvalidArgumentError("no program to run");
  if (auto slurm = ApplySlurmDefaults(parsed.given, &options); !slurm.ok()) return slurm;
  if (options.nproc_per_node < 1 || options.nnodes < 1 || options.node_rank < 0 ||
      options.node_rank >= options.nnodes || options.max_restarts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad sizes: --nproc_per_node ", options.nproc_per_node, " --nnodes ",
                     options.nnodes, " --node_rank ", options.node_rank));
  }
  if (options.node_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--node_timeout must be a positive number of seconds");
  }
  if (options.join && (options.standalone || options.nnodes != 1)) {
    return absl::InvalidArgumentError(
        "--join adds workers to a running job at --master_addr:--master_port: not with "
        "--standalone or --nnodes");
  }
  if (options.standalone && options.nnodes != 1) {
    return absl::InvalidArgumentError("--standalone runs one node");
  }
  return options;
}

}  // namespace tessera::launcher
