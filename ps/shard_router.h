// ShardRouter: a trainer's calls to the primaries of a parameter server's
// shards, carried across failovers (see Note [Parameter-server replication],
// ps/ps_server.h).
//
// A call goes to its shard's primary in the cached shard map, stamped with
// the map's epoch. When it fails because the primary died (Unavailable) or
// is no longer primary (Aborted: route again), the router reads the map
// again — waiting for the servers to record the failover — and sends the
// same message to the new primary, until the call's deadline. A primary
// that hangs (a lost machine, a paused process) fails nothing: while calls
// are in flight the router re-reads the map every `poll`, and a call whose
// shard moved is sent to the new primary at once (whichever answers first
// is taken: the servers apply each change once, see Note [Exactly-once pushes],
// ps/shard.h). A shard without backups has nobody to fail over to: its
// calls fail at once, naming the server. A shard that lost every replica
// fails its calls at once too — unless `wait_for_lost` (the job takes
// checkpoints, PsOptions::checkpoint_dir): a restarted server restores
// such a shard from the latest checkpoint (see Note [Sharded checkpoints],
// ps/shard_cut.cc), and its calls wait for that until their deadline.
//
// Thread-safety: thread-safe. Callbacks hold the router weakly: calls
// still in flight when it is destroyed fail at their deadline.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/future.h"
#include "common/mutex.h"
#include "ps/shard_map.h"
#include "rpc/runtime.h"

namespace tessera::ps {

class ShardRouter : public std::enable_shared_from_this<ShardRouter> {
 public:
  // The message of a call, stamped with the epoch it is routed by.
  using Encode = std::function<std::vector<c10::IValue>(int64_t epoch)>;

  static std::shared_ptr<ShardRouter> Make(rpc::Runtime& runtime, std::string job, ShardMap map,
                                           absl::Duration poll, bool wait_for_lost);

  // Calls `service` with encode(epoch) on `shard`'s primary (see above).
  // Errors name the shard and the server that gave them.
  Future<c10::IValue> Call(int64_t shard, const char* service, Encode encode, absl::Time deadline);
  ShardMap map() const;

 private:
  struct Routed;
  ShardRouter(rpc::Runtime& runtime, std::string job, ShardMap map, absl::Duration poll,
              bool wait_for_lost);
  void Send(const std::shared_ptr<Routed>& call);
  void Failed(const std::shared_ptr<Routed>& call, uint64_t attempt, const std::string& server,
              int64_t epoch, const absl::Status& status);
  // Reads the recorded map; returns whether it is newer than the cache.
  bool Refresh();
  // While calls are in flight: re-reads the map every poll_, and sends
  // again those whose shard moved (or came back, or whose wait for it ended).
  void SchedulePoll();
  void Poll();

  rpc::Runtime& runtime_;
  const std::string job_;
  const absl::Duration poll_;
  const bool wait_for_lost_;
  mutable Mutex mu_;
  ShardMap map_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Routed>> in_flight_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool polling_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera::ps
