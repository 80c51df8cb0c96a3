// NodeCoordinator: makes the launchers of a multi-node job restart their
// workers together, through the rendezvous store.
//
// Note [Restarting every node]
// A worker failure must restart the whole group, on every node, and the new
// group must not meet entries of the old one. Uncoordinated, each launcher
// restarted only its own workers, when its own workers failed, and node 0
// cleared the store whenever it restarted — possibly after another node's
// new workers had registered. So each attempt is a round r:
//   1. open: node 0 waits until every node has ended round r-1 (its workers
//      all gone), clears the store but for the launchers' keys, and sets
//      tessera-run/r/open to the round's nodes; the other nodes wait for
//      that key to start theirs;
//   2. run: a node whose worker fails sets tessera-run/r/failed; every node
//      watches that key and stops its workers when it appears;
//   (while running, every node beats under tessera-run/r/alive/<node>; a
//   silent node is lost, see Note [Lost nodes]; an unreachable store ends the
//   job: see Note [Node heartbeats])
//   3. end: each node sets tessera-run/r/ended/<node> once its workers are
//      gone: "stopped" (after a failure), "finished" (all succeeded) or
//      "interrupted" (its launcher got SIGINT/SIGTERM, and reports that as a
//      failure so the others stop); only stopped nodes take part again.
// A round with a failure anywhere is followed by round r+1 (up to
// --max_restarts) on every node. Node 0, which hosts the store, waits for
// every node to end the last round before it exits, so the store outlives
// their use of it; if it gives up restarting it marks the next round closed,
// so the others stop waiting at once. Every wait has a deadline.
//
// Note [Lost nodes]: a machine that dies takes its launcher with it, and
// says nothing: node 0 declares a node lost once it has not beaten for
// --node_timeout, naming it and when it was last heard from. If at least
// MIN nodes (--nnodes MIN:MAX) are left and the launcher's policy agrees
// (every worker of the node has an elastic role: launcher.cc), the job
// goes on: the node is recorded lost (tessera-run/r/lost/<node>), its
// ranks as left (so no graceful shutdown waits for them), and no end of
// the round is awaited from it. If the policy refuses, the group restarts
// without it (below); with fewer than MIN left, the job stops, naming it.
// A lost node whose link comes back reads its verdict at its next beat and
// stops its workers, naming it: its ranks have been given up, and its old
// workers must not act under them.
//
// Note [Regrouping without lost nodes]: when a lost node's workers cannot
// be let go (a DDP rank, a pipeline stage), but at least MIN nodes are
// left, node 0 records it lost all the same and reports a failure of the
// round, so every node stops its workers, and the launchers restart the
// group (if --max_restarts allows) on the nodes left — as torchrun's
// elastic agent re-forms its group. Node 0 opens each round with the list
// of its nodes ("0,1" under tessera-run/r/open); a node's workers take the
// ranks from its position in that list, and WORLD_SIZE shrinks to match,
// so the programs resume from their checkpoint re-sharded over fewer
// ranks. A node silent while node 0 waits for the end of a round is judged
// the same way, from the heartbeats the watcher last saw, so nothing waits
// for a dead node past --node_timeout. A node left out of a round's list
// (it came back late) is told so and stops; lost nodes never return.
//
// Thread-safety: one launcher thread calls the methods; WatchFailures runs
// a watcher thread of its own.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "store/store_client.h"

namespace tessera::launcher {

class NodeCoordinator {
 public:
  // Node 0's decision on a lost node (see Note [Lost nodes]), on the watcher
  // thread or in Open: nullopt to go on without it (having recorded its
  // ranks as left), or why the running group cannot (then it is restarted
  // without the node: see Note [Regrouping without lost nodes]). `first_rank`
  // is the node's first rank in the round; `what` says which node and
  // since when.
  using LostNodePolicy = std::function<std::optional<std::string>(int node, int first_rank,
                                                                   const std::string& what)>;

  // Forgets every key of the store but those starting with the prefix given
  // (node 0, between attempts).
  using ClearStore = std::function<void(const std::string& keep_prefix)>;

  // `clear` empties the store (used by node 0 only); `timeout` bounds each wait
  // for the other nodes; a node unheard for `node_timeout` is lost, and the
  // job goes on while `min_nodes` are live and `policy` agrees.
  NodeCoordinator(std::unique_ptr<store::StoreClient> store, ClearStore clear, int nnodes,
                  int node_rank, int nproc_per_node, absl::Duration timeout,
                  absl::Duration node_timeout, int min_nodes, LostNodePolicy policy);
  ~NodeCoordinator();

  // Step 1: the round's nodes in node-rank order (every node but those
  // lost; see Note [Regrouping without lost nodes]). An error if the round did
  // not open in time, or was closed, or does not include this node, or
  // (node 0) a node finished or was interrupted (it will not rejoin), or
  // fewer than MIN nodes are left.
  absl::StatusOr<std::vector<int>> Open(int round);
  // Step 2: returns a file descriptor that becomes readable when another
  // node reports a failure in `round` (valid until the next call or Stop).
  int WatchFailures(int round);
  void StopWatching();
  // Step 2, this node's side: `what` names the failed worker.
  void ReportFailure(int round, const std::string& what);
  // Why the watcher of WatchFailures woke when no node reported a failure:
  // a node (or node 0's store) went silent (see Note [Node heartbeats]). No
  // restart can include it.
  std::optional<std::string> LostNode() const;
  // Whether that lost node was recorded lost so that the group restarts on
  // the nodes left (see Note [Regrouping without lost nodes]); false when the
  // job cannot go on at all.
  bool Regrouping() const;
  // What another node reported for `round`, if anything.
  std::optional<std::string> ReportedFailure(int round);
  // Step 3, with how this node's round ended: only a node that stopped its
  // workers because of a failure takes part in another round.
  enum class Ending { kStopped, kFinished, kInterrupted };
  void End(int round, Ending how);
  // Node 0, before it exits: waits up to `timeout` for every node not lost
  // to end `round`.
  absl::Status AwaitAllEnded(int round, absl::Duration timeout);
  // Node 0, when it will not restart: the others waiting for `round` stop.
  void Close(int round);

 private:
  std::string Key(int round, const std::string& what) const;
  // Every node not declared lost, in node-rank order.
  std::vector<int> LiveNodes() const;
  std::string EndedKey(int round, int node) const;
  // The end keys of the nodes neither lost nor in `skip`.
  std::vector<std::string> EndedKeys(int round, const std::set<int>& skip = {}) const;
  // Where `node` beats in `round` (see Note [Node heartbeats]).
  std::string AliveKey(int round, int node) const;
  // When `node` was last heard beating in the round watched last, as of now.
  absl::Time LastHeard(int round, int node);
  // Waits up to `timeout` for the end of `round` from every node not lost;
  // a node silent for node_timeout_ is passed to `silent` and not waited
  // for, unless `silent` returns an error, which ends the wait.
  absl::Status AwaitEnds(int round, absl::Duration timeout,
                         const std::function<absl::Status(int node, absl::Time heard)>& silent);
  // What node 0 decided about a lost node (see Note [Lost nodes]).
  struct Verdict {
    enum Kind { kGoOn, kRegroup, kStop } kind;
    std::string what;  // the node, since when, and what follows
  };
  // Node 0: declares `node` lost in `round` and records it unless the job
  // must stop.
  Verdict DeclareLost(int round, int node, absl::Time last_heard);
  // Node 0's watcher, once a beat: judges the `watched` nodes silent for
  // node_timeout_ (DeclareLost) and stops watching those that ended. What
  // stops this node's workers, if anything.
  std::optional<std::string> JudgeSilentNodes(int round, std::set<int>& watched, absl::Time now);

  const std::unique_ptr<store::StoreClient> store_;
  const ClearStore clear_;
  const int nnodes_;
  const int node_rank_;
  const int nproc_per_node_;
  const absl::Duration timeout_;
  const absl::Duration node_timeout_;
  const int min_nodes_;
  const LostNodePolicy policy_;
  int wake_[2] = {-1, -1};  // the watcher writes to [1]; the launcher polls [0]
  std::atomic<bool> stop_watching_{false};
  std::thread watcher_;
  mutable Mutex mu_;
  std::optional<std::string> lost_ ABSL_GUARDED_BY(mu_);
  bool regrouping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<int> lost_nodes_ ABSL_GUARDED_BY(mu_);  // declared lost, the job going on
  std::vector<int> round_nodes_ ABSL_GUARDED_BY(mu_);  // the round's, from Open
  // Each node's last beat seen (value, when) in the round watched last:
  // the watcher's, then (once it is joined) Open's and AwaitAllEnded's.
  std::map<int, std::pair<std::string, absl::Time>> beats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::launcher
