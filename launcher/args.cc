#include <cstdlib>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "launcher/launcher.h"
#include "store/slurm_env.h"

namespace tessera::launcher {

namespace {

// Inside a Slurm allocation (one tessera-run per node, e.g. `srun
// --ntasks-per-node 1 tessera-run ...`), what the command line leaves out
// comes from Slurm: the node count, this node's index, and the first node
// of the allocation as the master.
absl::Status ApplySlurmDefaults(const std::set<std::string>& given, LaunchOptions* options) {
  if (options->standalone || std::getenv("SLURM_JOB_ID") == nullptr) return absl::OkStatus();
  if (!given.count("--nnodes")) {
    if (auto nodes = store::SlurmInt("SLURM_JOB_NUM_NODES")) options->nnodes = *nodes;
    if (auto nodes = store::SlurmInt("SLURM_NNODES")) options->nnodes = *nodes;
  }
  if (!given.count("--node_rank")) {
    if (auto node = store::SlurmInt("SLURM_NODEID")) options->node_rank = *node;
  }
  if (!given.count("--master_addr")) {
    auto master = store::SlurmMasterHost();
    if (!master.ok()) return master.status();
    if (master->has_value()) options->master_addr = **master;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseArgs(const std::vector<std::string>& args) {
  LaunchOptions options;
  std::set<std::string> given;
  size_t i = 0;
  auto int_value = [&](const std::string& flag, int* out) -> absl::Status {
    if (i + 1 >= args.size() || !absl::SimpleAtoi(args[i + 1], out)) {
      return absl::InvalidArgumentError(flag + " needs an integer");
    }
    ++i;
    return absl::OkStatus();
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    given.insert(arg);
    absl::Status status;
    if (arg == "--nproc_per_node") {
      status = int_value(arg, &options.nproc_per_node);
    } else if (arg == "--nnodes") {
      status = int_value(arg, &options.nnodes);
    } else if (arg == "--node_rank") {
      status = int_value(arg, &options.node_rank);
    } else if (arg == "--master_port") {
      status = int_value(arg, &options.master_port);
    } else if (arg == "--max_restarts") {
      status = int_value(arg, &options.max_restarts);
    } else if (arg == "--rdzv_timeout") {
      int seconds = 0;
      status = int_value(arg, &seconds);
      options.rendezvous_timeout = absl::Seconds(seconds);
    } else if (arg == "--master_addr") {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--master_addr needs a value");
      options.master_addr = args[++i];
    } else if (arg == "--standalone") {
      options.standalone = true;
    } else if (arg.rfind("--", 0) == 0) {
      return absl::InvalidArgumentError("unknown flag " + arg);
    } else {
      options.command.assign(args.begin() + i, args.end());
      break;
    }
    if (!status.ok()) return status;
  }
  if (options.command.empty()) return absl::InvalidArgumentError("no program to run");
  if (auto slurm = ApplySlurmDefaults(given, &options); !slurm.ok()) return slurm;
  if (options.nproc_per_node < 1 || options.nnodes < 1 || options.node_rank < 0 ||
      options.node_rank >= options.nnodes || options.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad sizes: --nproc_per_node ", options.nproc_per_node, " --nnodes ", options.nnodes,
        " --node_rank ", options.node_rank));
  }
  if (options.standalone && options.nnodes != 1) {
    return absl::InvalidArgumentError("--standalone runs one node");
  }
  return options;
}

}  // namespace tessera::launcher
