#include "launcher/launcher.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auth/job_secret.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "launcher/captured_signals.h"
#include "launcher/elastic_restarts.h"
#include "launcher/job_store.h"
#include "launcher/local_workers.h"
#include "launcher/node_coordinator.h"
#include "store/elastic_keys.h"
#include "store/store_client.h"

namespace tessera::launcher {
namespace {

// Workers of one job must share a secret (auth/job_secret.h). On one
// node the launcher makes a fresh one unless the user gave one; across
// nodes every launcher must be given the same one.
void EnsureJobSecret(const LaunchOptions& options) {
  if (std::getenv("TESSERA_JOB_SECRET") != nullptr ||
      std::getenv("TESSERA_JOB_SECRET_FILE") != nullptr) {
    return;
  }
  if (options.join) {
    Say("warning: --join without TESSERA_JOB_SECRET or TESSERA_JOB_SECRET_FILE: a job started "
        "with a secret will refuse these workers");
    return;
  }
  if (options.nnodes > 1) {
    Say("warning: no TESSERA_JOB_SECRET or TESSERA_JOB_SECRET_FILE: workers on several nodes "
        "run without a shared secret; anyone who can reach their ports can call them");
    return;
  }
  setenv("TESSERA_JOB_SECRET", absl::BytesToHexString(auth::RandomBytes(32)).c_str(), 1);
}

// tessera-run --join: takes the next nproc_per_node ranks beyond those the
// job has (the initial world plus earlier joins).
absl::StatusOr<int> TakeJoinRanks(store::StoreClient& store, const LaunchOptions& options) {
  namespace elastic = store::elastic;
  const std::string prefix = elastic::kDefaultPrefix;
  auto initial =
      elastic::ReadNumber(store, elastic::WorldSizeKey(prefix), options.rendezvous_timeout);
  if (!initial.ok()) return initial.status();
  TESSERA_ASSIGN_OR_RETURN(auto joined,
                           store.Add(elastic::JoinedKey(prefix), options.nproc_per_node));
  const int ranks = *initial + static_cast<int>(joined);
  auto bound = elastic::ReadNumber(store, elastic::MaxRanksKey(prefix), absl::ZeroDuration());
  if (bound.ok() && *bound > 0 && ranks > *bound) {
    // Give the ranks back: a later, smaller join may still fit.
    store.Add(elastic::JoinedKey(prefix), -options.nproc_per_node).IgnoreError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job allows at most ", *bound, " ranks (its --max_ranks) and has had ",
        ranks - options.nproc_per_node, "; ", options.nproc_per_node, " more do not fit"));
  }
  return ranks - options.nproc_per_node;
}

// What node 0 tells an elastic job's workers through the store
// (store/elastic_keys.h): the attempt's world size, the elastic roles, the
// node timeout and the most ranks --join may add. Best effort: a worker that
// cannot read a key waits for it, bounded.
void PublishJobKeys(store::StoreClient& store, const LaunchOptions& options, int world_size) {
  namespace elastic = store::elastic;
  const std::string& prefix = elastic::kDefaultPrefix;
  store.Set(elastic::WorldSizeKey(prefix), std::to_string(world_size)).IgnoreError();
  store.Set(elastic::ElasticRolesKey(prefix), options.elastic_roles).IgnoreError();
  if (options.nnodes > 1) {
    store
        .Set(elastic::NodeTimeoutKey(prefix),
             std::to_string(absl::ToInt64Seconds(options.node_timeout)))
        .IgnoreError();
  }
  if (options.max_ranks > 0) {
    store.Set(elastic::MaxRanksKey(prefix), std::to_string(options.max_ranks)).IgnoreError();
  }
}

// Run's state, set up once (Prepare), then the group's attempts: each
// opens a round of nodes (several nodes), starts and supervises this node's
// workers, and reports how it ended; the last one closes the job.
class Launch {
 public:
  Launch(const LaunchOptions& options, JobStore& rendezvous, const CapturedSignals& signals)
      : options_(options), rendezvous_(rendezvous), signals_(signals), resolved_(options) {
    if (options.standalone) resolved_.master_addr = "127.0.0.1";
  }

  // Elastic restarts, the node coordinator and --join's ranks; an error
  // says why the launcher cannot go on.
  absl::Status Prepare();
  // Runs attempts until one ends the job; the launcher's exit code.
  int RunAttempts();

 private:
  struct AttemptEnd {
    Outcome outcome;
    bool succeeded = false;
    std::string failure;
    std::optional<std::string> lost;  // a node, or the store, went silent
  };

  // Before attempt > 0: the last attempt's keys and role files would
  // mislead the new one.
  void ForgetLastAttempt(int attempt);
  // Several nodes: waits for the round's nodes and takes this node's ranks
  // among them; false if the workers cannot start.
  bool OpenRound(int attempt);
  AttemptEnd RunAttempt(int attempt);
  // Tells the other nodes how this node's attempt ended, and learns why
  // theirs did.
  void ReportEnd(int attempt, AttemptEnd& end);
  // After the last attempt: node 0 keeps the store up until the others are
  // done with it, then clears the job's keys.
  void CloseJob(int attempt, const AttemptEnd& end, bool given_up);
  // A lost node's ranks are let go if their roles are elastic (see Note [Lost
  // nodes]); else the reason they cannot be.
  std::optional<std::string> GoOnWithout(int first_rank, const std::string& what);
  // Forgets the last attempt's keys but those under `keep_prefix` (node 0).
  void ClearStore(const std::string& keep_prefix);
  std::string RoleFile(int rank) const {
    return elastic_restarts_ != nullptr ? elastic_restarts_->RoleFile(rank) : std::string();
  }
  bool HostsStore() const { return nodes_ != nullptr && options_.node_rank == 0; }

  const LaunchOptions& options_;
  JobStore& rendezvous_;
  const CapturedSignals& signals_;
  LaunchOptions resolved_;  // what the workers are told
  // Elastic jobs talk to the store themselves (store/elastic_keys.h).
  std::unique_ptr<store::StoreClient> job_store_;
  std::unique_ptr<ElasticRestarts> elastic_restarts_;
  const ScratchDir role_dir_;
  // Several nodes restart together (see Note [Restarting every node]).
  std::unique_ptr<NodeCoordinator> nodes_;
  int first_rank_ = 0;
  int world_size_ = 0;
};

absl::Status Launch::Prepare() {
  if (!options_.elastic_roles.empty() || options_.join || options_.max_ranks > 0) {
    job_store_ = rendezvous_.Connect();
    elastic_restarts_ = std::make_unique<ElasticRestarts>(
        ParseRoles(options_.elastic_roles), options_.max_restarts, job_store_.get(),
        store::elastic::kDefaultPrefix, role_dir_.path());
  }
  if (options_.nnodes > 1) {
    nodes_ = std::make_unique<NodeCoordinator>(
        rendezvous_.Connect(), [this](const std::string& keep) { ClearStore(keep); },
        options_.nnodes, options_.node_rank, options_.nproc_per_node, options_.rendezvous_timeout,
        options_.node_timeout, options_.min_nodes,
        [this](int, int first, const std::string& what) { return GoOnWithout(first, what); });
  }
  first_rank_ = options_.node_rank * options_.nproc_per_node;
  world_size_ = options_.nnodes * options_.nproc_per_node;
  if (options_.join) {
    auto joined = TakeJoinRanks(*job_store_, options_);
    if (!joined.ok()) {
      return absl::Status(joined.status().code(), "cannot join the job at " + job_store_->target() +
                                                      ": " + joined.status().ToString());
    }
    first_rank_ = *joined;
    world_size_ = first_rank_ + options_.nproc_per_node;
    Say(absl::StrCat("joining the running job as rank(s) ", first_rank_, "..", world_size_ - 1));
  }
  return absl::OkStatus();
}

std::optional<std::string> Launch::GoOnWithout(int first_rank, const std::string& what) {
  auto refused = elastic_restarts_ == nullptr
                     ? std::optional<std::string>("no worker role is elastic (--elastic_roles)")
                     : elastic_restarts_->GoOnWithout(first_rank, options_.nproc_per_node, what);
  if (!refused.has_value()) {
    Say(absl::StrCat(what, "; its ranks ", first_rank, "..",
                     first_rank + options_.nproc_per_node - 1,
                     " are recorded as left and the job goes on without them"));
  } else {
    Say(absl::StrCat(what, "; its workers cannot be let go (", *refused,
                     "): the group restarts on the nodes left ",
                     "(see Note [Regrouping without lost nodes])"));
  }
  return refused;
}

void Launch::ClearStore(const std::string& keep_prefix) {
  if (absl::Status cleared = rendezvous_.Clear(keep_prefix, options_.rendezvous_timeout);
      !cleared.ok()) {
    Say("warning: cannot clear the job's keys in etcd: " + cleared.ToString());
  }
}

int Launch::RunAttempts() {
  int exit_code = 1;
  // A joining node cannot restart the group: the running job owns the store.
  const int max_group_restarts = options_.join ? 0 : options_.max_restarts;
  for (int attempt = 0; attempt <= max_group_restarts; ++attempt) {
    if (attempt > 0) ForgetLastAttempt(attempt);
    if (nodes_ != nullptr && !OpenRound(attempt)) break;
    const AttemptEnd end = RunAttempt(attempt);
    // A lost node cannot be restarted with the others: the group restarts
    // without it if it can (see Note [Regrouping without lost nodes]), else
    // the job ends at once.
    const bool regrouping = end.lost.has_value() && nodes_->Regrouping();
    const bool given_up = end.lost.has_value() && !regrouping;
    const bool interrupted = end.outcome.interrupted_by != 0;
    if (end.succeeded) {
      exit_code = 0;
    } else if (interrupted) {
      exit_code = 128 + end.outcome.interrupted_by;
    } else if (attempt == max_group_restarts || given_up) {
      Say("giving up: " + end.failure);
      exit_code = end.outcome.failed_code != 0 ? end.outcome.failed_code : 1;
    }
    if (end.succeeded || interrupted || given_up || attempt == max_group_restarts) {
      CloseJob(attempt, end, given_up);
      break;
    }
  }
  return exit_code;
}

void Launch::ForgetLastAttempt(int attempt) {
  Say(absl::StrCat("restarting the group (", attempt, "/", options_.max_restarts, ")"));
  // Every worker of the last attempt is gone; its rendezvous entries
  // (addresses, process-group ids, done flags) would mislead the new one.
  // (With several nodes, NodeCoordinator::Open clears once all stopped.)
  if (nodes_ == nullptr) ClearStore("");
  // Likewise the old workers' roles: a new worker that dies before
  // declaring its own must not be judged by its predecessor's.
  role_dir_.Empty();
}

bool Launch::OpenRound(int attempt) {
  absl::StatusOr<std::vector<int>> open = nodes_->Open(attempt);
  if (!open.ok()) {
    Say("cannot start the workers: " + open.status().ToString());
    if (HostsStore()) nodes_->Close(attempt);  // the others stop waiting for it
    return false;
  }
  // Ranks follow the node's place among the round's nodes (see Note
  // [Regrouping without lost nodes]).
  const int place =
      static_cast<int>(std::find(open->begin(), open->end(), options_.node_rank) - open->begin());
  const int round_world = static_cast<int>(open->size()) * options_.nproc_per_node;
  if (attempt > 0 && round_world != world_size_) {
    Say(absl::StrCat("this attempt runs on nodes ", absl::StrJoin(*open, ","), ": ", round_world,
                     " ranks instead of ", world_size_));
  }
  first_rank_ = place * options_.nproc_per_node;
  world_size_ = round_world;
  return true;
}

Launch::AttemptEnd Launch::RunAttempt(int attempt) {
  if (job_store_ != nullptr && options_.node_rank == 0 && !options_.join) {
    PublishJobKeys(*job_store_, options_, world_size_);  // rank 0 records the world size too
  }
  const int port = rendezvous_.port();
  std::vector<Worker> workers;
  for (int local = 0; local < options_.nproc_per_node; ++local) {
    workers.push_back(Spawn(resolved_, first_rank_ + local, local, world_size_,
                            options_.join ? "join" : "", port, RoleFile(first_rank_ + local),
                            signals_.original_mask()));
  }
  const Respawn respawn = [this, port](const Worker& failed) {
    return Spawn(resolved_, failed.rank, failed.local_rank, failed.world_size, "rejoin", port,
                 RoleFile(failed.rank), signals_.original_mask());
  };
  const int failure_fd = nodes_ != nullptr ? nodes_->WatchFailures(attempt) : -1;
  AttemptEnd end;
  end.outcome = Supervise(workers, signals_.fd(), failure_fd, options_.stop_grace,
                          elastic_restarts_.get(), respawn, options_.rendezvous_timeout);
  end.succeeded = end.outcome.interrupted_by == 0 && !end.outcome.failed_rank.has_value() &&
                  !end.outcome.failed_elsewhere;
  if (end.outcome.failed_rank.has_value()) {
    end.failure = absl::StrCat("rank ", *end.outcome.failed_rank, " exited with code ",
                               end.outcome.failed_code);
  }
  if (nodes_ != nullptr) ReportEnd(attempt, end);
  return end;
}

void Launch::ReportEnd(int attempt, AttemptEnd& end) {
  const Outcome& outcome = end.outcome;
  nodes_->StopWatching();
  if (outcome.failed_rank.has_value()) nodes_->ReportFailure(attempt, end.failure);
  if (outcome.interrupted_by != 0) {
    nodes_->ReportFailure(attempt, absl::StrCat("interrupted by signal ", outcome.interrupted_by));
  }
  using Ending = NodeCoordinator::Ending;
  nodes_->End(attempt, end.succeeded                 ? Ending::kFinished
                       : outcome.interrupted_by != 0 ? Ending::kInterrupted
                                                     : Ending::kStopped);
  if (outcome.failed_elsewhere) {
    end.lost = nodes_->LostNode();
    end.failure =
        end.lost.has_value()
            ? *end.lost
            : nodes_->ReportedFailure(attempt).value_or("a worker on another node failed");
    // (A node lost for a regroup was named when it was declared.)
    if (!nodes_->Regrouping())
      Say((end.lost.has_value() ? "" : "another node reported: ") + end.failure);
  }
}

void Launch::CloseJob(int attempt, const AttemptEnd& end, bool given_up) {
  if (HostsStore()) {
    // The others stop waiting for another attempt, and the store stays up
    // until they have stopped using it (briefly, if interrupted).
    nodes_->Close(attempt + 1);
    absl::Status all =
        nodes_->AwaitAllEnded(attempt, end.outcome.interrupted_by == 0 && !given_up
                                           ? options_.rendezvous_timeout
                                           : options_.stop_grace + absl::Seconds(10));
    if (!all.ok()) Say("warning: not every node reported its end: " + all.ToString());
    // Every node ended or went silent: nobody uses the job's keys now.
    if (all.ok() || absl::IsUnavailable(all)) ClearStore("");
  } else if (nodes_ == nullptr) {
    ClearStore("");
  }
}

}  // namespace

int Run(const LaunchOptions& options) {
  // Restarting would not help a command that is not there.
  if (auto program = FindProgram(options.command.empty() ? "" : options.command[0]);
      !program.ok()) {
    Say(std::string(program.status().message()));
    return 127;
  }
  EnsureJobSecret(options);
  // The store serves only the job's processes (store/store_auth.h).
  auto secret = auth::JobSecret::FromEnv();
  if (!secret.ok()) {
    Say("cannot read the job secret: " + secret.status().ToString());
    return 1;
  }
  // Before any thread exists (launcher/captured_signals.h).
  const CapturedSignals signals;
  absl::StatusOr<JobStore> rendezvous = JobStore::Open(options, *secret);
  if (!rendezvous.ok()) {
    Say(std::string(rendezvous.status().message()));
    return 1;
  }
  if (!rendezvous->announcement().empty()) Say(rendezvous->announcement());
  Launch launch(options, *rendezvous, signals);
  if (absl::Status prepared = launch.Prepare(); !prepared.ok()) {
    Say(std::string(prepared.message()));
    return 1;
  }
  return launch.RunAttempts();
}

}  // namespace tessera::launcher
