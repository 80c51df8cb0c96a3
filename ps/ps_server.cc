#include "ps/ps_server.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/ps_messages.h"
#include "ps/shard_map.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"

namespace tessera::ps {

struct PsServer::State {
  rpc::Runtime* runtime = nullptr;
  ShardMap map;
  int64_t index = 0;                                     // the shard this server holds
  std::map<std::string, std::shared_ptr<Shard>> shards;  // by table

  // This server's shard for a request routed by `epoch` to `shard`, or why not.
  absl::StatusOr<std::shared_ptr<Shard>> Route(const std::string& table, int64_t epoch,
                                               int64_t shard) const {
    if (epoch != map.epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter server '", runtime->self().name, "': a request routed by shard map epoch ",
          epoch, " reached epoch ", map.epoch, " (refetch the shard map)"));
    }
    auto it = shards.find(table);
    if (it == shards.end()) {
      return absl::NotFoundError(
          absl::StrCat("parameter server '", runtime->self().name, "' has no table '", table, "'"));
    }
    if (shard != index) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter server '", runtime->self().name, "' holds shard ", index, " of '",
                       table, "', not shard ", shard,
                       shard >= 0 && shard < map.shards()
                           ? absl::StrCat(" (that is on '", map.servers[shard], "')")
                           : std::string()));
    }
    return it->second;
  }
  // Who sent the call: its rank and, from the runtime, its incarnation.
  Sender From(const rpc::CallContext& ctx) const {
    Sender sender{ctx.caller_rank, 0};
    if (auto info = runtime->membership().Find(ctx.caller_rank))
      sender.incarnation = info->incarnation;
    return sender;
  }
};

namespace {

// The ranks whose clocks count from the start.
absl::StatusOr<std::vector<int>> TrainerRanks(rpc::Runtime& runtime, const PsOptions& options) {
  std::vector<int> ranks;
  if (options.trainers.empty()) {
    for (const rpc::WorkerInfo& worker : runtime.workers()) {
      if (std::find(options.servers.begin(), options.servers.end(), worker.name) ==
          options.servers.end()) {
        ranks.push_back(worker.rank);
      }
    }
    return ranks;
  }
  for (const std::string& name : options.trainers) {
    auto rank = runtime.membership().RankOf(name);
    if (!rank.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter server: no trainer named '", name, "' in the job"));
    }
    ranks.push_back(*rank);
  }
  return ranks;
}

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

void Serve(const std::shared_ptr<PsServer::State>& state) {
  rpc::Registry& registry = state->runtime->registry();
  rpc::Serve<HelloRequest>(
      registry, [state](rpc::CallContext& ctx, HelloRequest m) -> absl::StatusOr<int64_t> {
        auto shard = state->Route(m.table, m.epoch, m.shard);
        if (!shard.ok()) return shard.status();
        return (*shard)->Hello(state->From(ctx));
      });
  rpc::Serve<PullRequest>(registry, [state](rpc::CallContext& ctx, PullRequest m) {
    using Rows = std::vector<at::Tensor>;
    if (auto ok = PartsAgree(m.tables.size(), {m.clocks.size(), m.keys.size()}); !ok.ok()) {
      return Future<Rows>::Ready(ok);
    }
    std::vector<Future<at::Tensor>> parts;
    for (size_t i = 0; i < m.tables.size(); ++i) {
      auto shard = state->Route(m.tables[i], m.epoch, m.shard);
      if (!shard.ok()) return Future<Rows>::Ready(shard.status());
      parts.push_back((*shard)->Pull(state->From(ctx), m.clocks[i], m.keys[i], ctx.deadline));
    }
    return WhenAllOk(parts).Then([parts](const absl::StatusOr<bool>& all) -> absl::StatusOr<Rows> {
      if (!all.ok()) return all.status();
      Rows rows;
      for (const auto& part : parts) rows.push_back(*part.Wait(absl::ZeroDuration()));
      return rows;
    });
  });
  rpc::Serve<PushRequest>(registry, [state](rpc::CallContext& ctx, PushRequest m) -> absl::Status {
    if (auto ok = PartsAgree(m.tables.size(),
                             {m.sequences.size(), m.clocks.size(), m.keys.size(), m.grads.size()});
        !ok.ok()) {
      return ok;
    }
    std::vector<std::shared_ptr<Shard>> shards;
    for (const std::string& table : m.tables) {
      auto shard = state->Route(table, m.epoch, m.shard);
      if (!shard.ok()) return shard.status();
      shards.push_back(*std::move(shard));
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      auto ok =
          shards[i]->Push(state->From(ctx), m.sequences[i], m.clocks[i], m.keys[i], m.grads[i]);
      if (!ok.ok()) return ok;
    }
    return absl::OkStatus();
  });
  rpc::Serve<ClockRequest>(
      registry, [state](rpc::CallContext& ctx, ClockRequest m) -> absl::Status {
        if (auto ok = PartsAgree(m.tables.size(), {m.clocks.size()}); !ok.ok()) return ok;
        for (size_t i = 0; i < m.tables.size(); ++i) {
          auto shard = state->Route(m.tables[i], m.epoch, m.shard);
          if (!shard.ok()) return shard.status();
          if (auto ok = (*shard)->Clock(state->From(ctx), m.clocks[i]); !ok.ok()) return ok;
        }
        return absl::OkStatus();
      });
  rpc::Serve<StatsRequest>(
      registry, [state](rpc::CallContext&, StatsRequest m) -> absl::StatusOr<std::vector<int64_t>> {
        auto shard = state->Route(m.table, m.epoch, m.shard);
        if (!shard.ok()) return shard.status();
        const ShardStats stats = (*shard)->Stats();
        return std::vector<int64_t>{stats.rows, stats.pushes_applied, stats.duplicates,
                                    stats.clock};
      });
  std::weak_ptr<PsServer::State> weak = state;
  state->runtime->membership().Subscribe([weak](const rpc::MembershipEvent& event) {
    if (event.kind != rpc::MembershipEventKind::kFailed &&
        event.kind != rpc::MembershipEventKind::kLeft) {
      return;
    }
    if (auto self = weak.lock()) {
      for (auto& [table, shard] : self->shards) shard->TrainerGone(event.rank, event.incarnation);
    }
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
  auto trainers = TrainerRanks(runtime, options);
  if (!trainers.ok()) return trainers.status();
  ShardMap proposed;
  proposed.servers = options.servers;
  for (const TableOptions& table : options.tables) proposed.shapes[table.name] = table.Shape();
  auto map = PublishShardMap(runtime.store(), options.job, proposed);
  if (!map.ok()) return map.status();

  auto state = std::make_shared<State>();
  state->runtime = &runtime;
  state->map = *map;
  state->index = mine - options.servers.begin();
  for (const TableOptions& table : options.tables) {
    state->shards[table.name] =
        std::make_shared<Shard>(table, state->index, map->shards(), *trainers, &runtime.timer());
  }
  Serve(state);
  return std::unique_ptr<PsServer>(new PsServer(std::move(state)));
}

std::shared_ptr<Shard> PsServer::shard(const std::string& table) const {
  auto it = state_->shards.find(table);
  return it == state_->shards.end() ? nullptr : it->second;
}

int64_t PsServer::epoch() const { return state_->map.epoch; }

}  // namespace tessera::ps
