#include "ps/ps_server.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/ps_messages.h"
#include "ps/server_state.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"

namespace tessera::ps {

namespace {

// A message of several tables' parts carries as many of each field.
absl::Status PartsAgree(size_t tables, std::initializer_list<size_t> fields) {
  for (size_t n : fields) {
    if (n != tables) {
      return absl::InvalidArgumentError(absl::StrCat("a parameter-server message of ", tables,
                                                     " tables with a field of ", n, " parts"));
    }
  }
  return absl::OkStatus();
}

using Void = std::monostate;

// This primary's part of each of `tables` for a request routed by `epoch`
// to `shard`, or the first reason it has none.
absl::StatusOr<std::vector<std::shared_ptr<Shard>>> RouteAll(PsServer::State& state,
                                                             const std::vector<std::string>& tables,
                                                             int64_t epoch, int64_t shard) {
  std::vector<std::shared_ptr<Shard>> shards;
  for (const std::string& table : tables) {
    TESSERA_ASSIGN_OR_RETURN(auto routed, state.RouteToPrimary(table, epoch, shard));
    shards.push_back(std::move(routed));
  }
  return shards;
}

// Answers `status` once the changes are on every backup: a request is
// acknowledged only then, whether it succeeded or failed part-way (what it
// changed before failing is kept, and must be everywhere too).
Future<Void> Acknowledged(const std::shared_ptr<PsServer::State>& state, int64_t shard,
                          Changes changes, absl::Status status) {
  if (changes.wait == 0) {
    return Future<Void>::Ready(status.ok() ? absl::StatusOr<Void>(Void{}) : status);
  }
  return state->Replicate(shard, std::move(changes.message), changes.wait)
      .Then([status](const absl::StatusOr<Void>& replicated) -> absl::StatusOr<Void> {
        if (!replicated.ok()) return replicated.status();
        if (!status.ok()) return status;
        return Void{};
      });
}

// Note [Trainers ahead of a restored shard]: a trainer's request of clock
// c says it ended every clock below c. Every shard knows that before the
// trainer goes on (a Clock is acknowledged only once every shard took it),
// except one restored from a checkpoint after it lost every replica (see Note
// [Sharded checkpoints], ps/shard_cut.cc): it holds its trainers where the
// checkpoint, or its server's reckoning, put them, and a trainer that ended
// later clocks before the loss will not end them again — a pull waiting
// for them would wait for good. So a request ahead of its shard first
// moves the trainer's clock there, as a Clock change of its own (made and
// replicated like one), then is served.
void CatchUp(const std::vector<std::shared_ptr<Shard>>& shards,
             const std::vector<std::string>& tables, const std::vector<int64_t>& clocks,
             const Sender& from, Changes* changes, absl::Status* status) {
  for (size_t i = 0; i < shards.size() && status->ok(); ++i) {
    if (!shards[i]->Behind(from.rank, clocks[i])) continue;
    auto logged = shards[i]->Clock(from, clocks[i]);
    if (logged.ok()) {
      changes->Add(tables[i], *logged, ShardOp{ShardOp::Kind::kClock, from, 0, clocks[i], {}, {}});
    } else {
      *status = logged.status();
    }
  }
}

// The trainers' changes: hello, push, clock.
void ServeChanges(const std::shared_ptr<PsServer::State>& state) {
  rpc::Registry& registry = state->runtime->registry();
  rpc::Serve<HelloRequest>(registry, [state](rpc::CallContext& ctx, HelloRequest m) {
    auto shard = state->RouteToPrimary(m.table, m.epoch, m.shard);
    if (!shard.ok()) return Future<int64_t>::Ready(shard.status());
    const Sender from = state->From(ctx);
    int64_t start = 0;
    auto logged = (*shard)->Hello(from, &start);
    if (!logged.ok()) return Future<int64_t>::Ready(logged.status());
    Changes changes;
    changes.Add(m.table, *logged, ShardOp{ShardOp::Kind::kHello, from, 0, 0, {}, {}});
    return Acknowledged(state, m.shard, std::move(changes), absl::OkStatus())
        .Then([start](const absl::StatusOr<Void>& done) -> absl::StatusOr<int64_t> {
          if (!done.ok()) return done.status();
          return start;
        });
  });
  rpc::Serve<PushRequest>(registry, [state](rpc::CallContext& ctx, PushRequest m) {
    if (auto ok = PartsAgree(m.tables.size(),
                             {m.sequences.size(), m.clocks.size(), m.keys.size(), m.grads.size()});
        !ok.ok()) {
      return Future<Void>::Ready(ok);
    }
    auto routed = RouteAll(*state, m.tables, m.epoch, m.shard);
    if (!routed.ok()) return Future<Void>::Ready(routed.status());
    const std::vector<std::shared_ptr<Shard>> shards = *std::move(routed);
    const Sender from = state->From(ctx);
    Changes changes;
    absl::Status status;
    CatchUp(shards, m.tables, m.clocks, from, &changes, &status);
    for (size_t i = 0; i < shards.size() && status.ok(); ++i) {
      ShardOp op{ShardOp::Kind::kPush, from, m.sequences[i], m.clocks[i], m.keys[i], m.grads[i]};
      auto logged = shards[i]->Push(from, op.sequence, op.clock, op.keys, op.grads);
      if (logged.ok()) {
        changes.Add(m.tables[i], *logged, op);
      } else {
        status = logged.status();
      }
    }
    return Acknowledged(state, m.shard, std::move(changes), status);
  });
  rpc::Serve<ClockRequest>(registry, [state](rpc::CallContext& ctx, ClockRequest m) {
    if (auto ok = PartsAgree(m.tables.size(), {m.clocks.size()}); !ok.ok()) {
      return Future<Void>::Ready(ok);
    }
    const Sender from = state->From(ctx);
    Changes changes;
    absl::Status status;
    for (size_t i = 0; i < m.tables.size() && status.ok(); ++i) {
      auto shard = state->RouteToPrimary(m.tables[i], m.epoch, m.shard);
      if (!shard.ok()) {
        status = shard.status();
        break;
      }
      auto logged = (*shard)->Clock(from, m.clocks[i]);
      if (logged.ok()) {
        changes.Add(m.tables[i], *logged,
                    ShardOp{ShardOp::Kind::kClock, from, 0, m.clocks[i], {}, {}});
      } else {
        status = logged.status();
      }
    }
    return Acknowledged(state, m.shard, std::move(changes), status);
  });
}

// The trainers' reads: pulls, a shard's stats.
void ServeReads(const std::shared_ptr<PsServer::State>& state) {
  rpc::Registry& registry = state->runtime->registry();
  rpc::Serve<PullRequest>(registry, [state](rpc::CallContext& ctx, PullRequest m) {
    using Rows = std::vector<at::Tensor>;
    if (auto ok = PartsAgree(m.tables.size(), {m.clocks.size(), m.keys.size()}); !ok.ok()) {
      return Future<Rows>::Ready(ok);
    }
    auto routed = RouteAll(*state, m.tables, m.epoch, m.shard);
    if (!routed.ok()) return Future<Rows>::Ready(routed.status());
    const std::vector<std::shared_ptr<Shard>> shards = *std::move(routed);
    const Sender from = state->From(ctx);
    const absl::Time deadline = ctx.deadline;
    Changes changes;
    absl::Status status;
    CatchUp(shards, m.tables, m.clocks, from, &changes, &status);
    // Read once the trainer's clock moved everywhere, if it had to; and
    // only by a primary whose backups vouch for it now (its lease): one
    // that was cut off or paused, and replaced, must not answer.
    const int64_t shard = m.shard;
    Future<Void> readable =
        changes.wait == 0 && status.ok()
            ? state->Leased(shard)  // the hot path: no clock to move
            : Acknowledged(state, shard, std::move(changes), status)
                  .Then([state, shard](const absl::StatusOr<Void>& caught_up) {
                    if (!caught_up.ok()) return Future<Void>::Ready(caught_up.status());
                    return state->Leased(shard);
                  });
    return readable.Then(
        [shards, m, from, deadline](const absl::StatusOr<Void>& leased) {
          if (!leased.ok()) return Future<Rows>::Ready(leased.status());
          std::vector<Future<at::Tensor>> parts;
          for (size_t i = 0; i < shards.size(); ++i) {
            parts.push_back(shards[i]->Pull(from, m.clocks[i], m.keys[i], deadline));
          }
          return WhenAllOk(parts).Then(
              [parts](const absl::StatusOr<bool>& all) -> absl::StatusOr<Rows> {
                if (!all.ok()) return all.status();
                Rows rows;
                for (const auto& part : parts) rows.push_back(*part.Wait(absl::ZeroDuration()));
                return rows;
              });
        });
  });
  rpc::Serve<StatsRequest>(
      registry, [state](rpc::CallContext&, StatsRequest m) -> absl::StatusOr<std::vector<int64_t>> {
        TESSERA_ASSIGN_OR_RETURN(auto shard, state->RouteToPrimary(m.table, m.epoch, m.shard));
        const ShardStats stats = shard->Stats();
        return std::vector<int64_t>{stats.rows, stats.pushes_applied, stats.duplicates, stats.clock,
                                    state->MessagesSent(m.shard)};
      });
}

void ServeReplicas(const std::shared_ptr<PsServer::State>& state) {
  rpc::Registry& registry = state->runtime->registry();
  rpc::Serve<ReplicateRequest>(registry, [state](rpc::CallContext& ctx, ReplicateRequest m) {
    const int64_t shard = m.shard;
    return state->Follow(ctx, std::move(m))
        .Then([state, shard](const absl::StatusOr<Void>& applied) -> absl::StatusOr<int64_t> {
          if (!applied.ok()) return applied.status();
          return state->LastChange(shard);
        });
  });
  rpc::Serve<HeartbeatRequest>(
      registry, [state](rpc::CallContext& ctx, HeartbeatRequest m) -> absl::StatusOr<int64_t> {
        int64_t last = 0;
        if (auto ok = state->Heard(ctx, m.epoch, m.shard, m.base, m.idle, &last); !ok.ok()) {
          return ok;
        }
        return last;
      });
  rpc::Serve<JoinRequest>(
      registry, [state](rpc::CallContext& ctx, JoinRequest m) { return state->AddBackup(ctx, m); });
  rpc::Serve<InstallRequest>(registry, [state](rpc::CallContext& ctx, InstallRequest m) {
    return state->Install(ctx, m);
  });
  rpc::Serve<DigestRequest>(
      registry,
      [state](rpc::CallContext&, DigestRequest m) -> absl::StatusOr<std::vector<int64_t>> {
        return state->Digest(m.table, m.shard);
      });
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(rpc::Runtime& runtime,
                                                          const PsOptions& options) {
  auto mine = std::find(options.servers.begin(), options.servers.end(), runtime.self().name);
  if (mine == options.servers.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", runtime.self().name, "' is not one of the parameter servers"));
  }
  if (options.backups < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a parameter server with ", options.backups, " backups"));
  }
  TESSERA_ASSIGN_OR_RETURN(auto trainers, TrainerRanks(runtime, options, options.servers));
  std::vector<std::string> hosts;
  for (const std::string& server : options.servers) {
    auto info = runtime.membership().Find(server);
    if (!info.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter server: no server named '", server, "' in the job"));
    }
    hosts.push_back(HostOf(*info));
  }
  ShardMap proposed = InitialShardMap(options.servers, hosts, options.backups);
  for (const TableOptions& table : options.tables) proposed.shapes[table.name] = table.Shape();
  TESSERA_ASSIGN_OR_RETURN(auto map, PublishShardMap(runtime.store(), options.job, proposed));

  auto state = std::make_shared<State>(runtime, options);
  state->Hold(map, trainers);
  // A job started anew resumes from its last checkpoint; a restarted
  // server (incarnation > 0) copies its shards from their live replicas.
  if (runtime.self().incarnation == 0) {
    if (auto resumed = state->Resume(); !resumed.ok()) return resumed;
  }
  return Serve(std::move(state));
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Join(rpc::Runtime& runtime,
                                                         const PsOptions& options) {
  const std::string& self = runtime.self().name;
  if (std::find(options.servers.begin(), options.servers.end(), self) != options.servers.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter server '", self, "' is one of the servers the job started with: Start it"));
  }
  if (auto running =
          ReadShardMap(runtime.store(), options.job, options.tables, options.start_timeout);
      !running.ok()) {
    return running.status();
  }
  // Named in the map's servers, every server reckons it among the joiners
  // of shards short of backups (its restarts find their name there).
  auto map = ChangeShardMap(runtime.store(), options.job,
                            [&self](const ShardMap& m) { return WithServer(m, self); });
  if (!map.ok()) return map.status();
  TESSERA_LOG(INFO) << "parameter server '" << self << "' added to job '" << options.job
                    << "' (shard map epoch " << map->epoch << ")";
  TESSERA_ASSIGN_OR_RETURN(auto trainers, TrainerRanks(runtime, options, map->servers));
  auto state = std::make_shared<State>(runtime, options);
  state->Hold(*map, trainers);
  return Serve(std::move(state));
}

std::unique_ptr<PsServer> PsServer::Serve(std::shared_ptr<State> state) {
  ServeChanges(state);
  ServeReads(state);
  ServeReplicas(state);
  ServeCheckpoints(state);
  state->Watch();
  return std::unique_ptr<PsServer>(new PsServer(std::move(state)));
}

std::shared_ptr<Shard> PsServer::shard(const std::string& table) const {
  return state_->PrimaryShard(table);
}

int64_t PsServer::epoch() const { return state_->Epoch(); }

ShardMap PsServer::shard_map() const { return state_->Map(); }

}  // namespace tessera::ps
