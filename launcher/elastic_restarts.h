// ElasticRestarts: which failed workers tessera-run restarts alone.
//
// Note [Restarting a rank alone]: with --elastic_roles (say "trainer"), a
// worker of one of those roles that fails is started again by itself while
// the rest of the job runs on: a parameter server does not lose its model
// because a trainer died. The role is the one the worker declared
// (RpcOptions::role), which its runtime records in the store (RoleKey,
// store/elastic_keys.h) and in a file its launcher reads
// (store/elastic_role.h), so that a launcher cut off from the store still
// knows it; a worker that died before declaring one restarts the group as
// before. Before starting it again the launcher marks the rank restarting
// (RestartingKey), so that a graceful shutdown elsewhere waits for the new
// incarnation instead of calling the rank dead — the new incarnation must
// meet the job through the store anyway, so while the store is out of
// reach (a cut link) the launcher retries the mark with backoff, up to
// --rdzv_timeout, and restarts the rank once the store answers; no other
// worker restarts (launcher.cc, Supervise). The new process
// gets TESSERA_JOIN=rejoin and enters the running job (see Note [Elastic
// membership], rpc/runtime.h). Each rank restarts alone up to
// --max_restarts times; after that it is recorded as left (LeftKey) and the
// job goes on without it.
//
// Thread-safety: one launcher thread uses it.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/store_client.h"

namespace tessera::launcher {

class ElasticRestarts {
 public:
  // `store` (not owned) is the job's; `prefix` the runtime's store prefix;
  // `role_dir` where this node's workers write their roles (RoleFile).
  ElasticRestarts(std::set<std::string> roles, int max_restarts, store::StoreClient* store,
                  std::string prefix, std::string role_dir);

  // The file a worker of `rank` declares its role in (TESSERA_ROLE_FILE).
  std::string RoleFile(int rank) const;

  enum class Decision {
    kRestartGroup,  // not an elastic role (or unknown): torchrun's behaviour
    kRestartAlone,  // start the rank again by itself
    kGoOnWithout,   // out of restarts: the rank has left, the job goes on
  };
  // For a worker of `rank` that exited with `exit_code` (non-zero). Records
  // a rank given up in the store; `why` says it in words for the log.
  Decision OnFailure(int rank, int exit_code, std::string* why);
  // Before a rank restarts alone: marks it restarting in the store, within
  // `timeout`.
  absl::Status MarkRestarting(int rank, int exit_code, absl::Duration timeout);
  // Ranks [first, first + count) were on a node that was lost (see Note [Lost
  // nodes], launcher/node_coordinator.h): if every one declared an elastic
  // role, records each as left with `why` and returns nullopt; otherwise
  // says which rank keeps the job from going on. Any thread (reads only
  // what the constructor set, and the thread-safe store).
  std::optional<std::string> GoOnWithout(int first, int count, const std::string& why) const;

 private:
  const std::set<std::string> roles_;
  const int max_restarts_;
  store::StoreClient* const store_;
  const std::string prefix_;
  const std::string role_dir_;
  std::map<int, int> restarts_;  // per rank
};

// "trainer,observer" -> {"trainer", "observer"}.
std::set<std::string> ParseRoles(const std::string& list);

}  // namespace tessera::launcher
