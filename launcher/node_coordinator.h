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
//      tessera-run/r/open; the other nodes wait for that key to start theirs;
//   2. run: a node whose worker fails sets tessera-run/r/failed; every node
//      watches that key and stops its workers when it appears;
//   (while running, every node beats under tessera-run/r/alive/<node>; a
//   silent node, or an unreachable store, ends the job: Note [Node heartbeats])
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
// Thread-safety: one launcher thread calls the methods; WatchFailures runs
// a watcher thread of its own.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::launcher {

class NodeCoordinator {
 public:
  // `hosted` is node 0's store (null elsewhere); `timeout` bounds each wait
  // for the other nodes.
  NodeCoordinator(std::unique_ptr<store::StoreClient> store, store::StoreServer* hosted,
                  int nnodes, int node_rank, absl::Duration timeout);
  ~NodeCoordinator();

  // Step 1. An error if the round did not open in time, or was closed, or
  // (node 0) a node finished or was interrupted: it will not rejoin.
  absl::Status Open(int round);
  // Step 2: returns a file descriptor that becomes readable when another
  // node reports a failure in `round` (valid until the next call or Stop).
  int WatchFailures(int round);
  void StopWatching();
  // Step 2, this node's side: `what` names the failed worker.
  void ReportFailure(int round, const std::string& what);
  // Why the watcher of WatchFailures woke when no node reported a failure:
  // a node (or node 0's store) went silent (Note [Node heartbeats]). No
  // restart can include it.
  std::optional<std::string> LostNode() const;
  // What another node reported for `round`, if anything.
  std::optional<std::string> ReportedFailure(int round);
  // Step 3, with how this node's round ended: only a node that stopped its
  // workers because of a failure takes part in another round.
  enum class Ending { kStopped, kFinished, kInterrupted };
  void End(int round, Ending how);
  // Node 0, before it exits: waits up to `timeout` for every node to end
  // `round`.
  absl::Status AwaitAllEnded(int round, absl::Duration timeout);
  // Node 0, when it will not restart: the others waiting for `round` stop.
  void Close(int round);

 private:
  std::string Key(int round, const std::string& what) const;
  std::vector<std::string> EndedKeys(int round) const;

  const std::unique_ptr<store::StoreClient> store_;
  store::StoreServer* const hosted_;
  const int nnodes_;
  const int node_rank_;
  const absl::Duration timeout_;
  int wake_[2] = {-1, -1};  // the watcher writes to [1]; the launcher polls [0]
  std::atomic<bool> stop_watching_{false};
  std::thread watcher_;
  mutable Mutex mu_;
  std::optional<std::string> lost_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::launcher
