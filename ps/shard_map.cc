#include "ps/shard_map.h"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "ps/key_hash.h"

namespace tessera::ps {

std::string TableOptions::Shape() const {
  return kind == TableKind::kDense ? absl::StrCat(name, ": dense ", rows, " x ", dim)
                                   : absl::StrCat(name, ": sparse x ", dim);
}

const std::string& ShardMap::primary(int64_t shard) const {
  static const std::string* const kNone = new std::string();
  return replicas[shard].empty() ? *kNone : replicas[shard][0];
}

bool ShardMap::HoldsReplica(int64_t shard, const std::string& server) const {
  return std::find(replicas[shard].begin(), replicas[shard].end(), server) != replicas[shard].end();
}

// One line per field: "epoch 1", "servers ps0,ps1", "table <shape>"...,
// "shard <since> ps0,ps1" per shard, in order.
std::string ShardMap::Encode() const {
  std::string text = absl::StrCat("epoch ", epoch, "\nservers ", absl::StrJoin(servers, ","));
  for (const auto& [name, shape] : shapes) absl::StrAppend(&text, "\ntable ", shape);
  for (size_t s = 0; s < replicas.size(); ++s) {
    absl::StrAppend(&text, "\nshard ", since[s], " ", absl::StrJoin(replicas[s], ","));
  }
  return text;
}

absl::StatusOr<ShardMap> ShardMap::Decode(const std::string& text) {
  ShardMap map;
  map.epoch = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> field =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (field.first == "epoch" && absl::SimpleAtoi(field.second, &map.epoch)) continue;
    if (field.first == "servers" && !field.second.empty()) {
      map.servers = absl::StrSplit(field.second, ',');
      continue;
    }
    if (field.first == "shard") {
      std::pair<absl::string_view, absl::string_view> shard =
          absl::StrSplit(field.second, absl::MaxSplits(' ', 1));
      int64_t since = 0;
      if (!absl::SimpleAtoi(shard.first, &since)) {
        return absl::InvalidArgumentError(absl::StrCat("shard map: unreadable line '", line, "'"));
      }
      map.since.push_back(since);
      map.replicas.push_back(shard.second.empty()
                                 ? std::vector<std::string>{}
                                 : std::vector<std::string>(absl::StrSplit(shard.second, ',')));
      continue;
    }
    if (field.first == "table") {
      std::string shape(field.second);
      map.shapes[shape.substr(0, shape.find(':'))] = shape;
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("shard map: unreadable line '", line, "'"));
  }
  if (map.epoch <= 0 || map.servers.empty() || map.replicas.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map without epoch or servers: '", text, "'"));
  }
  return map;
}

std::optional<ShardMap> WithServer(const ShardMap& map, const std::string& server) {
  if (std::find(map.servers.begin(), map.servers.end(), server) != map.servers.end()) {
    return std::nullopt;
  }
  ShardMap next = map;
  next.servers.push_back(server);
  ++next.epoch;
  return next;
}

ShardMap InitialShardMap(const std::vector<std::string>& servers,
                         const std::vector<std::string>& hosts, int backups) {
  ShardMap map;
  map.servers = servers;
  const int64_t n = static_cast<int64_t>(servers.size());
  auto host = [&](int64_t i) { return hosts.empty() ? std::string() : hosts[i]; };
  for (int64_t s = 0; s < n; ++s) {
    std::vector<std::string> replicas = {servers[s]};
    // The servers after the primary, in order: another host's first, so a
    // lost machine leaves every shard a replica when the job has several.
    std::vector<int64_t> after;
    for (int64_t d = 1; d < n; ++d) {
      if (host((s + d) % n) != host(s)) after.push_back((s + d) % n);
    }
    for (int64_t d = 1; d < n; ++d) {
      if (host((s + d) % n) == host(s)) after.push_back((s + d) % n);
    }
    for (int64_t i = 0; i < backups && i < static_cast<int64_t>(after.size()); ++i) {
      replicas.push_back(servers[after[i]]);
    }
    map.replicas.push_back(std::move(replicas));
    map.since.push_back(map.epoch);
  }
  return map;
}

std::optional<ShardMap> WithoutServer(const ShardMap& map, const std::string& server,
                                      int64_t shard) {
  ShardMap next = map;
  ++next.epoch;
  bool held = false;
  for (int64_t s = 0; s < next.shards(); ++s) {
    if (shard >= 0 && s != shard) continue;
    auto& replicas = next.replicas[s];
    auto it = std::find(replicas.begin(), replicas.end(), server);
    if (it == replicas.end()) continue;
    replicas.erase(it);
    next.since[s] = next.epoch;
    held = true;
  }
  if (!held) return std::nullopt;
  return next;
}

std::optional<ShardMap> WithBackup(const ShardMap& map, int64_t shard, const std::string& primary,
                                   const std::string& server, size_t replicas) {
  if (shard < 0 || shard >= map.shards() || map.primary(shard) != primary ||
      map.HoldsReplica(shard, server) || map.replicas[shard].size() >= replicas) {
    return std::nullopt;
  }
  ShardMap next = map;
  ++next.epoch;
  next.replicas[shard].push_back(server);
  return next;
}

std::pair<int64_t, int64_t> DenseRange(int64_t rows, int64_t shards, int64_t shard) {
  return {rows * shard / shards, rows * (shard + 1) / shards};
}

absl::StatusOr<at::Tensor> ShardsOfKeys(const TableOptions& table, int64_t shards,
                                        const at::Tensor& keys) {
  at::Tensor contiguous = keys.contiguous();
  at::Tensor out = at::empty({contiguous.numel()}, contiguous.options());
  const int64_t* key = contiguous.data_ptr<int64_t>();
  int64_t* shard = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < contiguous.numel(); ++i) {
    if (table.kind == TableKind::kSparse) {
      shard[i] = static_cast<int64_t>(MixKey(static_cast<uint64_t>(key[i])) %
                                      static_cast<uint64_t>(shards));
      continue;
    }
    if (key[i] < 0 || key[i] >= table.rows) {
      return absl::InvalidArgumentError(absl::StrCat("key ", key[i], " of dense table '",
                                                     table.name, "' is outside its rows 0..",
                                                     table.rows - 1));
    }
    // The inverse of DenseRange: the last shard whose range starts at or before the key.
    int64_t s = key[i] * shards / table.rows;
    while (s + 1 < shards && DenseRange(table.rows, shards, s + 1).first <= key[i]) ++s;
    while (DenseRange(table.rows, shards, s).first > key[i]) --s;
    shard[i] = s;
  }
  return out;
}

std::string ShardMapKey(const std::string& job) {
  return absl::StrCat("tessera/ps/", job, "/shard_map");
}

namespace {

// FailedPrecondition unless `recorded` has `proposed`'s shapes, and its
// servers are `proposed`'s and then those added to the running job.
absl::Status SameMap(const ShardMap& recorded, const ShardMap& proposed) {
  const bool same_servers =
      recorded.servers.size() >= proposed.servers.size() &&
      std::equal(proposed.servers.begin(), proposed.servers.end(), recorded.servers.begin());
  if (same_servers && recorded.shapes == proposed.shapes) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the store holds another shard map than this server's: recorded\n",
                   recorded.Encode(), "\nhere\n", proposed.Encode(),
                   "\n(every worker of the job must declare the same servers and tables)"));
}

}  // namespace

absl::StatusOr<ShardMap> PublishShardMap(store::StoreClient& store, const std::string& job,
                                         const ShardMap& proposed) {
  TESSERA_ASSIGN_OR_RETURN(auto now, store.CompareSet(ShardMapKey(job), "", proposed.Encode()));
  TESSERA_ASSIGN_OR_RETURN(auto recorded, ShardMap::Decode(now));
  if (auto same = SameMap(recorded, proposed); !same.ok()) return same;
  return recorded;
}

absl::StatusOr<ShardMap> ChangeShardMap(
    store::StoreClient& store, const std::string& job,
    const std::function<std::optional<ShardMap>(const ShardMap&)>& change) {
  auto text = store.Get(ShardMapKey(job), absl::ZeroDuration());
  if (!text.ok()) return text.status();
  for (;;) {
    TESSERA_ASSIGN_OR_RETURN(auto recorded, ShardMap::Decode(*text));
    std::optional<ShardMap> next = change(recorded);
    if (!next.has_value()) return recorded;
    TESSERA_ASSIGN_OR_RETURN(auto now, store.CompareSet(ShardMapKey(job), *text, next->Encode()));
    // The store answers the value after: ours when it took (or when
    // another server made the very same change).
    if (now == next->Encode()) return *std::move(next);
    text = std::move(now);  // another server changed it first: apply to theirs
  }
}

absl::StatusOr<ShardMap> CurrentShardMap(store::StoreClient& store, const std::string& job) {
  TESSERA_ASSIGN_OR_RETURN(auto text, store.Get(ShardMapKey(job), absl::ZeroDuration()));
  return ShardMap::Decode(text);
}

absl::StatusOr<ShardMap> ReadShardMap(store::StoreClient& store, const std::string& job,
                                      const std::vector<TableOptions>& tables,
                                      absl::Duration timeout) {
  auto text = store.Get(ShardMapKey(job), timeout);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("no shard map of parameter-server job '", job,
                                     "' (have its servers started?): ", text.status().message()));
  }
  TESSERA_ASSIGN_OR_RETURN(auto map, ShardMap::Decode(*text));
  for (const TableOptions& table : tables) {
    auto it = map.shapes.find(table.name);
    const std::string there = it == map.shapes.end() ? "no such table" : it->second;
    if (there != table.Shape()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", table.name, "' is ", table.Shape(), " here but ", there, " on the servers"));
    }
  }
  return map;
}

}  // namespace tessera::ps
