// ShardMap: where every table's shards live — shard i of each table on
// servers[i] — with an epoch, in the store (Note [Shard map]).
//
// Note [Shard map]: the servers of a job propose the same map (their names,
// in the job's order, and each table's shape) by compare-and-set on one key,
// so exactly one map is ever recorded for an epoch, whoever writes first. A
// trainer reads it (waiting for it, up to its deadline), checks its tables'
// shapes against the servers', and caches it; every request carries the
// epoch it was routed by, and a server refuses another epoch's request with
// FailedPrecondition naming both, so a trainer can never act on a map that
// changed under it (failover raises the epoch: the next issue).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
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
  std::vector<std::string> servers;           // shard i of every table: servers[i]
  std::map<std::string, std::string> shapes;  // table name -> TableOptions::Shape()

  int64_t shards() const { return static_cast<int64_t>(servers.size()); }
  std::string Encode() const;
  static absl::StatusOr<ShardMap> Decode(const std::string& text);
};

// The rows [first, second) of a dense table's shard.
std::pair<int64_t, int64_t> DenseRange(int64_t rows, int64_t shards, int64_t shard);
// The shard of each key (int64, 1-D), as an int64 tensor; InvalidArgument for
// a dense key outside 0..rows-1.
absl::StatusOr<at::Tensor> ShardsOfKeys(const TableOptions& table, int64_t shards,
                                        const at::Tensor& keys);

// The store key of a job's shard map.
std::string ShardMapKey(const std::string& job);
// Records `proposed` unless a map is recorded already; returns the recorded
// one. FailedPrecondition when the recorded map has other servers or shapes.
absl::StatusOr<ShardMap> PublishShardMap(store::StoreClient& store, const std::string& job,
                                         const ShardMap& proposed);
// Waits up to `timeout` for the job's map; FailedPrecondition when one of
// `tables` has another shape there than here, or is not there.
absl::StatusOr<ShardMap> ReadShardMap(store::StoreClient& store, const std::string& job,
                                      const std::vector<TableOptions>& tables,
                                      absl::Duration timeout);

}  // namespace tessera::ps
