// The parameter server's messages (see Note [Typed internal services],
// rpc/internal_service.h): one struct per request, its fields listed once.
// Each names the table, the shard map's epoch it was routed by (see Note [Shard
// map], ps/shard_map.h) and the shard; who sent it — the trainer's rank and
// incarnation — the server takes from the connection, not from the message.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "ps/shard_snapshot.h"

namespace tessera::ps {

namespace services {
inline constexpr char kHello[] = "tessera.ps.hello";
inline constexpr char kPull[] = "tessera.ps.pull";
inline constexpr char kPush[] = "tessera.ps.push";
inline constexpr char kClock[] = "tessera.ps.clock";
inline constexpr char kStats[] = "tessera.ps.stats";
inline constexpr char kReplicate[] = "tessera.ps.replicate";
inline constexpr char kHeartbeat[] = "tessera.ps.heartbeat";
inline constexpr char kDigest[] = "tessera.ps.digest";
inline constexpr char kJoin[] = "tessera.ps.join";
inline constexpr char kInstall[] = "tessera.ps.install";
inline constexpr char kCut[] = "tessera.ps.cut";
inline constexpr char kSaved[] = "tessera.ps.saved";
}  // namespace services

// A trainer starts on a shard: answers the clock it starts at.
struct HelloRequest {
  static constexpr const char* kService = services::kHello;
  static constexpr bool kCarriesUserValues = false;
  using Response = int64_t;
  std::string table;
  int64_t epoch = 0;
  int64_t shard = 0;
  auto Fields() { return std::tie(table, epoch, shard); }
};

// Several tables' parts of one call, in one message per shard: part i is
// about tables[i].
//
// The rows of distinct keys[i] (int64, 1-D) of tables[i], as of clocks[i]:
// answers [keys[i], dim] for each part, in order.
struct PullRequest {
  static constexpr const char* kService = services::kPull;
  static constexpr bool kCarriesUserValues = false;
  using Response = std::vector<at::Tensor>;
  std::vector<std::string> tables;
  int64_t epoch = 0;
  int64_t shard = 0;
  std::vector<int64_t> clocks;
  std::vector<at::Tensor> keys;
  auto Fields() { return std::tie(tables, epoch, shard, clocks, keys); }
};

// Gradients grads[i] ([keys, dim] floats) for distinct keys[i] of
// tables[i], the trainer's sequences[i]-th push to this shard of that table
// (see Note [Exactly-once pushes], ps/shard.h). Each part is applied whole or
// not at all, and once; the parts independently of each other.
struct PushRequest {
  static constexpr const char* kService = services::kPush;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  std::vector<std::string> tables;
  int64_t epoch = 0;
  int64_t shard = 0;
  std::vector<int64_t> sequences;
  std::vector<int64_t> clocks;
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> grads;
  auto Fields() { return std::tie(tables, epoch, shard, sequences, clocks, keys, grads); }
};

// The trainer is at clocks[i] now in tables[i] (see Note [Parameter-server
// consistency]): one message per shard for every table of a Clock().
struct ClockRequest {
  static constexpr const char* kService = services::kClock;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  std::vector<std::string> tables;
  int64_t epoch = 0;
  int64_t shard = 0;
  std::vector<int64_t> clocks;
  auto Fields() { return std::tie(tables, epoch, shard, clocks); }
};

// A shard's ShardStats: {rows, pushes applied, duplicates, clock}, then the
// messages of changes its primary sent its backups (see Note [Replication
// batches], ps/server_replication.cc).
struct StatsRequest {
  static constexpr const char* kService = services::kStats;
  static constexpr bool kCarriesUserValues = false;
  using Response = std::vector<int64_t>;
  std::string table;
  int64_t epoch = 0;
  int64_t shard = 0;
  auto Fields() { return std::tie(table, epoch, shard); }
};

// A checkpoint (see Note [Sharded checkpoints], ps/shard_cut.cc): cut every
// one of `tables` at `clock`. Answers, for each, the clock its shard agreed
// to cut at (Shard::Cut): the trainer asks again at the latest until all agree.
struct CutRequest {
  static constexpr const char* kService = services::kCut;
  static constexpr bool kCarriesUserValues = false;
  using Response = std::vector<int64_t>;
  std::vector<std::string> tables;
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t clock = 0;
  auto Fields() { return std::tie(tables, epoch, shard, clock); }
};

// Completes once this shard of every one of `tables` wrote its checkpoint
// at `clock` (Shard::Saved).
struct SavedRequest {
  static constexpr const char* kService = services::kSaved;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  std::vector<std::string> tables;
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t clock = 0;
  auto Fields() { return std::tie(tables, epoch, shard, clock); }
};

// Between a shard's replicas (see Note [Parameter-server replication],
// ps/ps_server.h): the changes its primary made, change i being lsns[i] of
// the shard (ps/op_log.h), of tables[i], of kind kinds[i] (ShardOp::Kind)
// for the trainer (ranks[i], incarnations[i]); a push's sequences[i],
// clocks[i], keys[i] and grads[i] (empty tensors for the other kinds).
// `base`: the last change the primary made before it became primary; a
// backup whose own last differs diverged from it, and refuses. Answered,
// once the backup applied them all, with the backup's last change. A
// message sent again is routed anew: `epoch` stays its first field
// (PsServer::State::SendAgain).
struct ReplicateRequest {
  static constexpr const char* kService = services::kReplicate;
  static constexpr bool kCarriesUserValues = false;
  using Response = int64_t;
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t base = 0;
  std::vector<std::string> tables;
  std::vector<int64_t> lsns, kinds, ranks, incarnations, sequences, clocks;
  std::vector<at::Tensor> keys, grads;
  auto Fields() {
    return std::tie(epoch, shard, base, tables, lsns, kinds, ranks, incarnations, sequences, clocks,
                    keys, grads);
  }
};

// A primary to each backup while trainers use it (PsOptions::
// failure_timeout): it is primary of `shard` at `epoch` (`base` as in
// ReplicateRequest); `idle`: no trainer used it for a while, and it falls
// silent until one does. A backup that answers vouches that it takes no
// part in another primary for now (the primary's lease), and says its
// last change.
struct HeartbeatRequest {
  static constexpr const char* kService = services::kHeartbeat;
  static constexpr bool kCarriesUserValues = false;
  using Response = int64_t;
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t base = 0;
  bool idle = false;
  auto Fields() { return std::tie(epoch, shard, base, idle); }
};

// Any replica of `shard`, primary or not: {changes made (its last lsn),
// Shard::Digest of `table`, rows}. For tests and tools comparing replicas.
struct DigestRequest {
  static constexpr const char* kService = services::kDigest;
  static constexpr bool kCarriesUserValues = false;
  using Response = std::vector<int64_t>;
  std::string table;
  int64_t shard = 0;
  auto Fields() { return std::tie(table, shard); }
};

// A server to `shard`'s primary (re-replication, see Note [Parameter-server
// replication]): make me a backup. The primary sends it every table's
// snapshot (InstallRequest) and, from before the first, every change it
// makes; once it holds them all, the primary adds it to the shard map.
// Answered once the copy began: the joiner judges it by the parts that
// come, not as a whole (a shard of any size may join).
struct JoinRequest {
  static constexpr const char* kService = services::kJoin;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  int64_t epoch = 0;
  int64_t shard = 0;
  auto Fields() { return std::tie(epoch, shard); }
};

// A primary to a server joining `shard` (JoinRequest): part of `table`'s
// shard as of change `cut` (Shard::Snapshot) — its rows from `first_row`
// (ShardSnapshot::Rows), or, `last`, the rest (ShardSnapshot::WithoutRows);
// parts of at most 64 MiB, one at a time, so that a large shard neither
// fills the queue to the joiner nor holds up the changes sent beside it.
// `start`: the last change made before the primary began sending the
// joiner its changes (no table's cut is before it). Answered with the
// joiner's last change.
struct InstallRequest {
  static constexpr const char* kService = services::kInstall;
  static constexpr bool kCarriesUserValues = false;
  using Response = int64_t;
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t start = 0;
  int64_t cut = 0;
  std::string table;
  int64_t first_row = 0;
  bool last = false;
  ShardSnapshot snapshot;
  auto Fields() {
    ShardSnapshot& s = snapshot;
    return std::tie(epoch, shard, start, cut, table, first_row, last, s.keys, s.values, s.optimizer,
                    s.trainers, s.sequences_above, s.counters, s.aggregates, s.aggregate_pushers,
                    s.aggregate_keys, s.aggregate_grads);
  }
};

}  // namespace tessera::ps
