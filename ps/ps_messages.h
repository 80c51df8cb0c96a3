// The parameter server's messages (Note [Typed internal services],
// rpc/internal_service.h): one struct per request, its fields listed once.
// Each names the table, the shard map's epoch it was routed by (Note [Shard
// map], ps/shard_map.h) and the shard; who sent it — the trainer's rank and
// incarnation — the server takes from the connection, not from the message.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace tessera::ps {

namespace services {
inline constexpr char kHello[] = "tessera.ps.hello";
inline constexpr char kPull[] = "tessera.ps.pull";
inline constexpr char kPush[] = "tessera.ps.push";
inline constexpr char kClock[] = "tessera.ps.clock";
inline constexpr char kStats[] = "tessera.ps.stats";
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
// (Note [Exactly-once pushes], ps/shard.h). Each part is applied whole or
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

// The trainer is at clocks[i] now in tables[i] (Note [Parameter-server
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

// A shard's ShardStats: {rows, pushes applied, duplicates, clock}.
struct StatsRequest {
  static constexpr const char* kService = services::kStats;
  static constexpr bool kCarriesUserValues = false;
  using Response = std::vector<int64_t>;
  std::string table;
  int64_t epoch = 0;
  int64_t shard = 0;
  auto Fields() { return std::tie(table, epoch, shard); }
};

}  // namespace tessera::ps
