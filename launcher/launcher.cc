#include "launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "auth/job_secret.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "launcher/captured_signals.h"
#include "launcher/elastic_restarts.h"
#include "launcher/job_store.h"
#include "launcher/node_coordinator.h"
#include "store/elastic_keys.h"
#include "store/store_client.h"

namespace tessera::launcher {
namespace {

struct Worker {
  int rank = -1;
  int local_rank = -1;
  int world_size = 0;  // WORLD_SIZE as this worker was told it
  pid_t pid = -1;
  int output_fd = -1;       // the worker's stdout and stderr
  std::string partial;      // output not yet ended by a newline
  std::optional<int> exit;  // exit code, or 128 + signal
};

void Say(const std::string& text) {
  std::string line = "[tessera-run] " + text + "\n";
  [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
}

void Emit(Worker& worker, const char* data, size_t size, bool flush) {
  worker.partial.append(data, size);
  size_t start = 0;
  for (size_t nl; (nl = worker.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line =
        absl::StrCat("[rank ", worker.rank, "] ", worker.partial.substr(start, nl - start + 1));
    [[maybe_unused]] ssize_t n = ::write(1, line.data(), line.size());
  }
  worker.partial.erase(0, start);
  if (flush && !worker.partial.empty()) {
    std::string line = absl::StrCat("[rank ", worker.rank, "] ", worker.partial, "\n");
    [[maybe_unused]] ssize_t n = ::write(1, line.data(), line.size());
    worker.partial.clear();
  }
}

// A directory of the launcher's own (its workers' role files), removed
// with it; path() is empty if none could be made.
class ScratchDir {
 public:
  ScratchDir() {
    std::string path = (std::filesystem::temp_directory_path() / "tessera-run.XXXXXX").string();
    if (mkdtemp(path.data()) != nullptr) path_ = path;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  // Removes what the directory holds, keeping it.
  void Empty() const {
    std::error_code ignored;
    if (path_.empty()) return;
    for (const auto& entry : std::filesystem::directory_iterator(path_, ignored)) {
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }

 private:
  std::string path_;
};

// Starts one worker with its environment; its output goes to a pipe. A
// worker that cannot be started is reported and counts as having exited
// with 127, as a shell's "command not found". `join` is TESSERA_JOIN:
// empty at the job's start, "rejoin" for a rank restarted alone, "join" for
// a rank beyond the initial ones. `role_file` (if not empty) is where the
// worker declares its role (TESSERA_ROLE_FILE, store/elastic_role.h).
Worker Spawn(const LaunchOptions& options, int rank, int local_rank, int world_size,
             const std::string& join, int port, const std::string& role_file,
             const sigset_t& original_mask) {
  Worker worker;
  worker.rank = rank;
  worker.local_rank = local_rank;
  worker.world_size = world_size;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    Say(absl::StrCat("cannot start rank ", worker.rank, ": pipe: ", std::strerror(errno)));
    worker.exit = 127;
    return worker;
  }
  SpawnOptions spawn;
  spawn.argv = options.command;
  spawn.env = {{"RANK", std::to_string(worker.rank)},
               {"LOCAL_RANK", std::to_string(local_rank)},
               {"WORLD_SIZE", std::to_string(world_size)},
               {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
               {"MASTER_ADDR", options.master_addr},
               {"MASTER_PORT", std::to_string(port)},
               {"TESSERA_STORE_HOSTED", "1"},
               {"TESSERA_JOIN", join}};
  if (!options.store_url.empty()) spawn.env.push_back({"TESSERA_STORE", options.store_url});
  if (!role_file.empty()) spawn.env.push_back({"TESSERA_ROLE_FILE", role_file});
  spawn.output_fd = fds[1];
  // Workers start with default signal handling, whatever the launcher
  // inherited (an ignored SIGTERM would defeat stopping them).
  spawn.default_signals = {SIGINT, SIGTERM, SIGPIPE, SIGCHLD};
  spawn.signal_mask = &original_mask;
  absl::StatusOr<pid_t> pid = tessera::Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    Say(absl::StrCat("cannot start rank ", worker.rank, ": ", pid.status().message()));
    close(fds[0]);
    worker.exit = 127;
    return worker;
  }
  worker.pid = *pid;
  worker.output_fd = fds[0];
  return worker;
}

struct Outcome {
  std::optional<int> failed_rank;  // the first worker that failed
  int failed_code = 0;
  int interrupted_by = 0;         // a signal the launcher received
  bool failed_elsewhere = false;  // another node reported a failure
  std::vector<int> given_up;      // elastic ranks out of restarts, let go
  bool any_succeeded = false;     // some worker of this node exited 0
};

// Starts a failed worker's rank again by itself (Note [Restarting a rank
// alone]); null when no rank restarts alone.
using Respawn = std::function<Worker(const Worker& failed)>;

// A rank to restart alone once the store takes its restarting mark.
struct PendingRestart {
  Worker failed;
  absl::Time failed_at;
  absl::Time next_try;
  absl::Duration backoff;
};

// Each try to mark a rank restarting gives the store this long; a store out
// of reach (a cut link) is tried again after a backoff of up to kMaxBackoff,
// for --rdzv_timeout in all (Note [Restarting a rank alone]).
constexpr absl::Duration kMarkTimeout = absl::Seconds(2);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

// Runs until every worker has exited and its output is drained. `failure_fd`
// (or -1) becomes readable when another node's worker failed. With
// `elastic`, a failed worker of an elastic role is restarted by `respawn`
// (or let go) instead of stopping the group; the store out of reach delays
// the restart by up to `restart_timeout`.
Outcome Supervise(std::vector<Worker>& workers, int signal_fd, int failure_fd, absl::Duration grace,
                  ElasticRestarts* elastic, const Respawn& respawn,
                  absl::Duration restart_timeout) {
  Outcome outcome;
  std::vector<Worker> restarted;  // appended to `workers` between loops
  std::vector<PendingRestart> pending;
  std::optional<absl::Time> kill_at;
  auto stop_all = [&](int signal) {
    for (auto& w : workers) {
      if (!w.exit.has_value()) ::kill(w.pid, signal);
    }
    if (!kill_at.has_value()) kill_at = absl::Now() + grace;
  };
  // The first worker to fail (of this node, before any interruption) stops
  // the others.
  auto exited = [&](const Worker& w) {
    if (*w.exit == 0) outcome.any_succeeded = true;
    if (*w.exit == 0 || outcome.failed_rank.has_value() || outcome.interrupted_by != 0 ||
        outcome.failed_elsewhere) {
      return;
    }
    std::string why;  // why the group stops, when a rank could restart alone
    if (elastic != nullptr) {
      const auto decision = elastic->OnFailure(w.rank, *w.exit, &why);
      if (decision != ElasticRestarts::Decision::kRestartGroup) {
        Say(absl::StrCat("rank ", w.rank, " failed with exit code ", *w.exit, ": ", why));
        if (decision == ElasticRestarts::Decision::kRestartAlone) {
          const absl::Time now = absl::Now();
          pending.push_back({w, now, now, absl::Milliseconds(500)});
        } else {
          outcome.given_up.push_back(w.rank);
        }
        return;  // dealt with alone: the group goes on (Note [Restarting a rank alone])
      }
      why = " (" + why + ")";
    }
    outcome.failed_rank = w.rank;
    outcome.failed_code = *w.exit;
    Say(absl::StrCat("rank ", w.rank, " failed with exit code ", *w.exit, why,
                     "; stopping the other workers"));
    stop_all(SIGTERM);
  };
  for (auto& w : workers) {
    if (w.exit.has_value()) exited(w);  // could not be started
  }
  // Restarts the pending ranks whose mark the store takes; gives up (the
  // group stops) on one the store has not answered for `restart_timeout`.
  // None restarts once the group is stopping.
  auto restart_pending = [&] {
    if (outcome.failed_rank.has_value() || outcome.interrupted_by != 0 ||
        outcome.failed_elsewhere) {
      pending.clear();
      return;
    }
    for (auto it = pending.begin(); it != pending.end();) {
      const absl::Time now = absl::Now();
      if (now < it->next_try) {
        ++it;
        continue;
      }
      const int rank = it->failed.rank;
      const absl::Status marked = elastic->MarkRestarting(rank, *it->failed.exit, kMarkTimeout);
      if (marked.ok()) {
        if (it->next_try > it->failed_at) {
          Say(absl::StrCat("the store answers again after ",
                           absl::FormatDuration(absl::Trunc(now - it->failed_at, absl::Seconds(1))),
                           ": restarting rank ", rank, " alone"));
        }
        restarted.push_back(respawn(it->failed));
        it = pending.erase(it);
        continue;
      }
      if (now - it->failed_at >= restart_timeout) {
        outcome.failed_rank = rank;
        outcome.failed_code = *it->failed.exit;
        Say(absl::StrCat("rank ", rank, " cannot restart alone: the store did not answer for ",
                         absl::FormatDuration(restart_timeout),
                         " (--rdzv_timeout): ", marked.message(), "; stopping the other workers"));
        stop_all(SIGTERM);
        it = pending.erase(it);
        continue;
      }
      if (it->next_try == it->failed_at) {
        Say(absl::StrCat("cannot reach the store to restart rank ", rank, " alone (",
                         marked.message(), "); retrying until it answers, up to --rdzv_timeout"));
      }
      it->next_try = now + it->backoff;
      it->backoff = std::min(2 * it->backoff, kMaxBackoff);
      ++it;
    }
  };
  while (true) {
    restart_pending();
    std::vector<Worker> fresh = std::move(restarted);
    restarted.clear();
    for (auto& w : fresh) {
      workers.push_back(std::move(w));
      if (workers.back().exit.has_value()) exited(workers.back());  // could not be started
    }
    bool running = !pending.empty();
    std::vector<pollfd> fds = {{signal_fd, POLLIN, 0},
                               {outcome.failed_elsewhere ? -1 : failure_fd, POLLIN, 0}};
    for (auto& w : workers) {
      if (!w.exit.has_value() || w.output_fd >= 0) running = true;
      if (w.output_fd >= 0) fds.push_back({w.output_fd, POLLIN, 0});
    }
    if (!running) {
      // Every worker let go, none done: the node's part failed after all.
      if (!outcome.given_up.empty() && !outcome.any_succeeded && !outcome.failed_rank.has_value()) {
        outcome.failed_rank = outcome.given_up.front();
        outcome.failed_code = 1;
        Say("every worker of this node failed and was given up on");
      }
      return outcome;
    }
    if (kill_at.has_value() && absl::Now() >= *kill_at) {
      for (auto& w : workers) {
        if (!w.exit.has_value()) ::kill(w.pid, SIGKILL);
      }
    }
    // The timeout only matters while stopping workers (to escalate) or
    // retrying a restart; the pipes and the signalfd (SIGCHLD included)
    // wake us otherwise.
    int timeout_ms = kill_at.has_value() ? 100 : -1;
    for (const PendingRestart& restart : pending) {
      const int until = static_cast<int>(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(restart.next_try - absl::Now())));
      timeout_ms = timeout_ms < 0 ? until : std::min(timeout_ms, until);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return outcome;
    if (fds[1].revents & POLLIN) {
      outcome.failed_elsewhere = true;
      Say("another node failed, or this node is out of the job (why below); stopping this node's "
          "workers");
      stop_all(SIGTERM);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
          outcome.interrupted_by = static_cast<int>(info.ssi_signo);
          Say(absl::StrCat("received signal ", info.ssi_signo, ", forwarding to the workers"));
          stop_all(static_cast<int>(info.ssi_signo));
        }
      }
      int status = 0;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (auto& w : workers) {
          if (w.pid != pid) continue;
          w.exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          exited(w);
        }
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      for (auto& w : workers) {
        if (w.output_fd != fds[i].fd) continue;
        char buffer[4096];
        const ssize_t n = read(w.output_fd, buffer, sizeof(buffer));
        if (n > 0) {
          Emit(w, buffer, static_cast<size_t>(n), false);
        } else {
          Emit(w, "", 0, true);
          close(w.output_fd);
          w.output_fd = -1;
        }
      }
    }
  }
}

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
  auto joined = store.Add(elastic::JoinedKey(prefix), options.nproc_per_node);
  if (!joined.ok()) return joined.status();
  const int ranks = *initial + static_cast<int>(*joined);
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

}  // namespace

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
  // Before any worker starts: says why the launcher cannot go on.
  auto give_up = [](const std::string& why) {
    Say(why);
    return 1;
  };
  absl::StatusOr<JobStore> opened = JobStore::Open(options, *secret);
  if (!opened.ok()) return give_up(std::string(opened.status().message()));
  JobStore& rendezvous = *opened;
  if (!rendezvous.announcement().empty()) Say(rendezvous.announcement());
  LaunchOptions resolved = options;
  if (options.standalone) resolved.master_addr = "127.0.0.1";
  const int port = rendezvous.port();
  auto connect_store = [&] { return rendezvous.Connect(); };
  // Forgets the last attempt's keys but those under `keep_prefix` (node 0).
  auto clear_store = [&](const std::string& keep_prefix) {
    if (absl::Status cleared = rendezvous.Clear(keep_prefix, options.rendezvous_timeout);
        !cleared.ok()) {
      Say("warning: cannot clear the job's keys in etcd: " + cleared.ToString());
    }
  };

  // Elastic jobs talk to the store themselves (store/elastic_keys.h).
  namespace elastic = store::elastic;
  std::unique_ptr<store::StoreClient> job_store;
  std::unique_ptr<ElasticRestarts> elastic_restarts;
  const ScratchDir role_dir;
  if (!options.elastic_roles.empty() || options.join || options.max_ranks > 0) {
    job_store = connect_store();
    elastic_restarts = std::make_unique<ElasticRestarts>(ParseRoles(options.elastic_roles),
                                                         options.max_restarts, job_store.get(),
                                                         elastic::kDefaultPrefix, role_dir.path());
  }

  // Several nodes restart together (Note [Restarting every node]); a lost
  // node's workers are let go if their roles are elastic (Note [Lost nodes]).
  std::unique_ptr<NodeCoordinator> nodes;
  if (options.nnodes > 1) {
    auto go_on_without = [&options, restarts = elastic_restarts.get()](
                             int node, int first,
                             const std::string& what) -> std::optional<std::string> {
      auto refused = restarts == nullptr
                         ? std::optional<std::string>("no worker role is elastic (--elastic_roles)")
                         : restarts->GoOnWithout(first, options.nproc_per_node, what);
      if (!refused.has_value()) {
        Say(absl::StrCat(what, "; its ranks ", first, "..", first + options.nproc_per_node - 1,
                         " are recorded as left and the job goes on without them"));
      } else {
        Say(absl::StrCat(what, "; its workers cannot be let go (", *refused,
                         "): the group restarts on the nodes left (Note [Regrouping without "
                         "lost nodes])"));
      }
      return refused;
    };
    nodes = std::make_unique<NodeCoordinator>(
        connect_store(), clear_store, options.nnodes, options.node_rank, options.nproc_per_node,
        options.rendezvous_timeout, options.node_timeout, options.min_nodes, go_on_without);
  }
  const bool hosts_store = nodes != nullptr && options.node_rank == 0;
  int first_rank = options.node_rank * options.nproc_per_node;
  int world_size = options.nnodes * options.nproc_per_node;
  if (options.join) {
    auto joined = TakeJoinRanks(*job_store, options);
    if (!joined.ok()) {
      return give_up("cannot join the job at " + job_store->target() + ": " +
                     joined.status().ToString());
    }
    first_rank = *joined;
    world_size = first_rank + options.nproc_per_node;
    Say(absl::StrCat("joining the running job as rank(s) ", first_rank, "..", world_size - 1));
  }
  auto role_file = [&](int rank) {
    return elastic_restarts != nullptr ? elastic_restarts->RoleFile(rank) : std::string();
  };
  const Respawn respawn = [&](const Worker& failed) {
    return Spawn(resolved, failed.rank, failed.local_rank, failed.world_size, "rejoin", port,
                 role_file(failed.rank), signals.original_mask());
  };

  int exit_code = 1;
  // A joining node cannot restart the group: the running job owns the store.
  const int max_group_restarts = options.join ? 0 : options.max_restarts;
  for (int attempt = 0; attempt <= max_group_restarts; ++attempt) {
    if (attempt > 0) {
      Say(absl::StrCat("restarting the group (", attempt, "/", options.max_restarts, ")"));
      // Every worker of the last attempt is gone; its rendezvous entries
      // (addresses, process-group ids, done flags) would mislead the new one.
      // (With several nodes, NodeCoordinator::Open clears once all stopped.)
      if (nodes == nullptr) clear_store("");
      // Likewise the old workers' roles: a new worker that dies before
      // declaring its own must not be judged by its predecessor's.
      role_dir.Empty();
    }
    if (nodes != nullptr) {
      absl::StatusOr<std::vector<int>> open = nodes->Open(attempt);
      if (!open.ok()) {
        Say("cannot start the workers: " + open.status().ToString());
        if (hosts_store) nodes->Close(attempt);  // the others stop waiting for it
        break;
      }
      // Ranks follow the node's place among the round's nodes (Note
      // [Regrouping without lost nodes]).
      const int place = static_cast<int>(
          std::find(open->begin(), open->end(), options.node_rank) - open->begin());
      const int round_world = static_cast<int>(open->size()) * options.nproc_per_node;
      if (attempt > 0 && round_world != world_size) {
        Say(absl::StrCat("this attempt runs on nodes ", absl::StrJoin(*open, ","), ": ",
                         round_world, " ranks instead of ", world_size));
      }
      first_rank = place * options.nproc_per_node;
      world_size = round_world;
    }
    if (job_store != nullptr && options.node_rank == 0 && !options.join) {
      PublishJobKeys(*job_store, options, world_size);  // rank 0 records the world size too
    }
    std::vector<Worker> workers;
    for (int local = 0; local < options.nproc_per_node; ++local) {
      workers.push_back(Spawn(resolved, first_rank + local, local, world_size,
                              options.join ? "join" : "", port, role_file(first_rank + local),
                              signals.original_mask()));
    }
    const int failure_fd = nodes != nullptr ? nodes->WatchFailures(attempt) : -1;
    Outcome outcome = Supervise(workers, signals.fd(), failure_fd, options.stop_grace,
                                elastic_restarts.get(), respawn, options.rendezvous_timeout);
    const bool succeeded = outcome.interrupted_by == 0 && !outcome.failed_rank.has_value() &&
                           !outcome.failed_elsewhere;
    std::string failure;
    std::optional<std::string> lost;  // a node, or the store, went silent
    if (outcome.failed_rank.has_value()) {
      failure =
          absl::StrCat("rank ", *outcome.failed_rank, " exited with code ", outcome.failed_code);
    }
    if (nodes != nullptr) {
      nodes->StopWatching();
      if (outcome.failed_rank.has_value()) nodes->ReportFailure(attempt, failure);
      if (outcome.interrupted_by != 0) {
        nodes->ReportFailure(attempt,
                             absl::StrCat("interrupted by signal ", outcome.interrupted_by));
      }
      using Ending = NodeCoordinator::Ending;
      nodes->End(attempt, succeeded                     ? Ending::kFinished
                          : outcome.interrupted_by != 0 ? Ending::kInterrupted
                                                        : Ending::kStopped);
      if (outcome.failed_elsewhere) {
        lost = nodes->LostNode();
        failure = lost.has_value()
                      ? *lost
                      : nodes->ReportedFailure(attempt).value_or("a worker on another node failed");
        // (A node lost for a regroup was named when it was declared.)
        if (!nodes->Regrouping()) Say((lost.has_value() ? "" : "another node reported: ") + failure);
      }
    }
    // A lost node cannot be restarted with the others: the group restarts
    // without it if it can (Note [Regrouping without lost nodes]), else
    // the job ends at once.
    const bool regrouping = lost.has_value() && nodes->Regrouping();
    const bool given_up = lost.has_value() && !regrouping;
    const bool last = succeeded || outcome.interrupted_by != 0 || given_up ||
                      attempt == max_group_restarts;
    if (succeeded) {
      exit_code = 0;
    } else if (outcome.interrupted_by != 0) {
      exit_code = 128 + outcome.interrupted_by;
    } else if (attempt == max_group_restarts || given_up) {
      Say("giving up: " + failure);
      exit_code = outcome.failed_code != 0 ? outcome.failed_code : 1;
    }
    if (last && hosts_store) {
      // The others stop waiting for another attempt, and the store stays up
      // until they have stopped using it (briefly, if interrupted).
      nodes->Close(attempt + 1);
      absl::Status all =
          nodes->AwaitAllEnded(attempt, outcome.interrupted_by == 0 && !given_up
                                            ? options.rendezvous_timeout
                                            : options.stop_grace + absl::Seconds(10));
      if (!all.ok()) Say("warning: not every node reported its end: " + all.ToString());
      // Every node ended or went silent: nobody uses the job's keys now.
      if (all.ok() || absl::IsUnavailable(all)) clear_store("");
    } else if (last && nodes == nullptr) {
      clear_store("");
    }
    if (last) break;
  }
  return exit_code;
}

}  // namespace tessera::launcher
