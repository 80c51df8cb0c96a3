// ShardMap: where every table's shards live — shard i of each table on its
// replicas, the primary first — with an epoch, in the store (see Note [Shard
// map]).
//
// Note [Shard map]: the servers of a job propose the same map (their names,
// in the job's order, and each table's shape) by compare-and-set on one key,
// so exactly one map is ever recorded for an epoch, whoever writes first. A
// trainer reads it (waiting for it, up to its deadline), checks its tables'
// shapes against the servers', and caches it; every request carries the
// epoch it was routed by, and a server refuses another epoch's request with
// FailedPrecondition naming both, so a trainer can never act on a map that
// changed under it.
//
// Every later change — a primary's backup made primary, a server taken out
// of every shard it held (see Note [Parameter-server replication],
// ps/ps_server.h), a server added to the job (WithServer) — is a function of the recorded map, written by
// compare-and-set from that map's text (ChangeShardMap): of two servers
// that change the same map, one wins, and the other applies its change to
// the winner's map or finds it done. The epoch rises by one per change, and
// each shard records the epoch its replicas last changed at (`since`), so a
// change to one shard does not turn away requests to the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/table_options.h"
#include "store/store_client.h"

namespace tessera::ps {

struct ShardMap {
  int64_t epoch = 1;
  std::vector<std::string> servers;           // the job's, in order; then any added (WithServer)
  std::map<std::string, std::string> shapes;  // table name -> TableOptions::Shape()
  // Shard i of every table: on replicas[i], replicas[i][0] its primary (none
  // left: the shard lost every replica); since[i], the epoch they were set at.
  std::vector<std::vector<std::string>> replicas;
  std::vector<int64_t> since;

  int64_t shards() const { return static_cast<int64_t>(replicas.size()); }
  // Shard s's primary, or "" when it lost every replica.
  const std::string& primary(int64_t shard) const;
  bool HoldsReplica(int64_t shard, const std::string& server) const;
  std::string Encode() const;
  static absl::StatusOr<ShardMap> Decode(const std::string& text);
};

// `map` with `server` added to its servers (a server joining a running
// job, PsServer::Join), at the next epoch; nullopt if it is there.
std::optional<ShardMap> WithServer(const ShardMap& map, const std::string& server);

// The first map of `servers`: shard i's primary is servers[i], its
// `backups` backups the servers after it in order, those on another host
// than the primary first (`hosts`: each server's host; empty: one host).
ShardMap InitialShardMap(const std::vector<std::string>& servers,
                         const std::vector<std::string>& hosts, int backups);
// `map` without `server` in any shard (a shard it was primary of has its
// first backup as primary), at the next epoch; nullopt if it held nothing.
// With `shard` >= 0, without it in that shard alone.
std::optional<ShardMap> WithoutServer(const ShardMap& map, const std::string& server,
                                      int64_t shard = -1);

// `map` with `server` a backup of `shard`, at the next epoch (the shard's
// `since` unchanged: its primary serves on); nullopt unless `primary` is
// still its primary, `server` holds none of it and it has fewer than
// `replicas` replicas.
std::optional<ShardMap> WithBackup(const ShardMap& map, int64_t shard, const std::string& primary,
                                   const std::string& server, size_t replicas);

// The rows [first, second) of a dense table's shard.
std::pair<int64_t, int64_t> DenseRange(int64_t rows, int64_t shards, int64_t shard);
// The shard of each key (int64, 1-D), as an int64 tensor; InvalidArgument for
// a dense key outside 0..rows-1.
absl::StatusOr<at::Tensor> ShardsOfKeys(const TableOptions& table, int64_t shards,
                                        const at::Tensor& keys);

// The store key of a job's shard map.
std::string ShardMapKey(const std::string& job);
// Records `proposed` unless a map is recorded already; returns the recorded
// one. FailedPrecondition when the recorded map has other shapes, or other
// servers than `proposed`'s followed by any added since (WithServer).
absl::StatusOr<ShardMap> PublishShardMap(store::StoreClient& store, const std::string& job,
                                         const ShardMap& proposed);
// Waits up to `timeout` for the job's map; FailedPrecondition when one of
// `tables` has another shape there than here, or is not there.
// Changes the job's recorded map by `change` — nullopt: nothing to change,
// the recorded map is answered — by compare-and-set, applying `change` to
// whichever map is recorded, until it takes. Returns the map recorded after.
absl::StatusOr<ShardMap> ChangeShardMap(
    store::StoreClient& store, const std::string& job,
    const std::function<std::optional<ShardMap>(const ShardMap&)>& change);
// The recorded map now, without waiting.
absl::StatusOr<ShardMap> CurrentShardMap(store::StoreClient& store, const std::string& job);
absl::StatusOr<ShardMap> ReadShardMap(store::StoreClient& store, const std::string& job,
                                      const std::vector<TableOptions>& tables,
                                      absl::Duration timeout);

}  // namespace tessera::ps
