// A parameter server's part in checkpoints (see Note [Sharded checkpoints],
// ps/shard_cut.cc): the cut trainers ask for, taken and written once
// reached, and a job's start from the latest one.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "ps/checkpoint_files.h"
#include "ps/server_state.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"

namespace tessera::ps {

namespace {

using Void = std::monostate;

// How often a primary records its shards' clocks (see Note [Progress
// records]): a small file per shard five times a second costs nothing
// beside training (one in 5,000 steps of 1 ms), and a restore's reckoning
// of its trainers' clocks trails them by no more.
constexpr absl::Duration kProgressEvery = absl::Milliseconds(200);

}  // namespace

std::shared_ptr<Shard> PsServer::State::MakeShard(const TableOptions& table, int64_t shard,
                                                  int64_t shards, std::vector<int> trainers,
                                                  std::shared_ptr<OpLog> log) {
  auto made = std::make_shared<Shard>(table, shard, shards, std::move(trainers), std::move(log),
                                      &runtime->timer());
  std::weak_ptr<State> weak = weak_from_this();
  made->OnCutReached([weak, shard, name = table.name](int64_t clock) {
    // Reached by a trainer's change, on the thread serving it: a copy and
    // a file are for the pool.
    auto self = weak.lock();
    ThreadPool* pool = self ? self->runtime->live_executor() : nullptr;
    if (pool == nullptr) return;
    pool->Post([weak, shard, name, clock] {
      if (auto self = weak.lock()) self->TakeCut(shard, name, clock);
    });
  });
  return made;
}

absl::Status PsServer::State::Resume() {
  const std::optional<CheckpointLayout> layout =
      LatestCheckpoint(options.checkpoint_dir, options.tables);
  if (!layout.has_value()) return absl::OkStatus();
  // Read before this job's primaries record anything of their own.
  const Rollback rollback = RollbackSince(options.checkpoint_dir, layout->clock);
  TESSERA_LOG(WARNING) << "parameter server '" << self << "' resumes job '" << options.job
                       << "' from the checkpoint at clock " << layout->clock << " under "
                       << options.checkpoint_dir << "; the job before it: "
                       << rollback.ToString();
  MutexLock lock(&mu_);  // before serving: nothing else runs yet
  for (auto& [s, r] : replicas_) {
    for (auto& [name, shard] : r.tables) {
      const absl::Time started = absl::Now();
      auto rows = RestoreShardCheckpoint(options.checkpoint_dir, *layout, *shard, s, map_.shards(),
                                         layout->clock);
      if (!rows.ok()) return rows.status();
      TESSERA_LOG(INFO) << "parameter server '" << self << "' resumed table '" << name << "' shard "
                        << s << " of " << map_.shards() << " from the checkpoint at clock "
                        << layout->clock << " under " << options.checkpoint_dir << ": " << *rows
                        << " rows from " << layout->shards.at(name) << " shards, in "
                        << absl::FormatDuration(absl::Now() - started);
    }
  }
  return absl::OkStatus();
}

int64_t PsServer::State::LostShardToRestoreLocked() const {
  if (options.checkpoint_dir.empty() || absl::Now() < join_after_) return -1;
  for (const auto& [s, r] : replicas_) {
    if (r.role == ReplicaRole::kJoining) return -1;  // one at a time
  }
  std::set<std::string> live;
  for (const rpc::Member& member : runtime->membership().Members()) {
    if (member.state == rpc::MemberState::kLive) live.insert(member.info.name);
  }
  const auto& servers = map_.servers;
  for (int64_t s = 0; s < map_.shards(); ++s) {
    if (!map_.replicas[s].empty() || replicas_.count(s) > 0) continue;
    // Every server's same first choice: the first live one from the
    // shard's own (servers[s]) on.
    for (size_t i = 0; i < servers.size(); ++i) {
      const std::string& server = servers[(s + i) % servers.size()];
      if (live.count(server) == 0) continue;
      if (server == self) return s;
      break;
    }
  }
  return -1;
}

void PsServer::State::RestoreLost() {
  std::shared_ptr<OpLog> log;
  std::map<std::string, std::shared_ptr<Shard>> tables;
  int64_t s = -1, shards = 0, trainers_at = -1;
  {
    MutexLock lock(&mu_);
    s = LostShardToRestoreLocked();
    if (s < 0) return;
    shards = map_.shards();
    // Where its trainers are: as far as this server's other shards know.
    for (const auto& [index, r] : replicas_) {
      for (const auto& [name, shard] : r.tables) {
        trainers_at = std::max(trainers_at, shard->Stats().clock);
      }
    }
    Replica& r = replicas_[s];  // named nowhere yet: not dropped meanwhile
    r.index = s;
    r.role = ReplicaRole::kJoining;
    log = r.log;
  }
  auto fail = [this, s](const std::string& why) {
    GiveUpJoin(s, absl::StrCat("could not restore shard ", s, ", which lost every replica: ", why));
  };
  const std::optional<CheckpointLayout> layout =
      LatestCheckpoint(options.checkpoint_dir, options.tables);
  if (!layout.has_value()) {
    return fail(absl::StrCat("no complete checkpoint under ", options.checkpoint_dir));
  }
  // Or as far as the shard's own primary last recorded, if further (this
  // server may hold no other shard that its trainers use).
  const Rollback recorded = RollbackSince(options.checkpoint_dir, layout->clock);
  if (recorded.shards == shards && recorded.reached.count(s) > 0) {
    trainers_at = std::max(trainers_at, recorded.reached.at(s));
  }
  const int64_t clock = std::max(trainers_at, layout->clock);
  auto trainers = TrainerRanks(*runtime, options, Map().servers);
  if (!trainers.ok()) return fail(trainers.status().ToString());
  for (const TableOptions& table : options.tables) {
    auto shard = MakeShard(table, s, shards, *trainers, log);
    auto rows = RestoreShardCheckpoint(options.checkpoint_dir, *layout, *shard, s, shards, clock);
    if (!rows.ok()) return fail(rows.status().ToString());
    tables[table.name] = shard;
  }
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(s);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kJoining) return;
    it->second.tables = tables;
  }
  // Named its primary by compare-and-set: of two servers restoring it, one.
  const std::string& me = self;
  auto map = ChangeShardMap(runtime->store(), options.job,
                            [&](const ShardMap& m) -> std::optional<ShardMap> {
                              if (!m.replicas[s].empty()) return std::nullopt;
                              ShardMap next = m;
                              next.since[s] = ++next.epoch;
                              next.replicas[s] = {me};
                              return next;
                            });
  if (!map.ok() || map->primary(s) != self) {
    return fail(map.ok() ? absl::StrCat("'", map->primary(s), "' restored it")
                         : map.status().ToString());
  }
  TESSERA_LOG(WARNING) << "parameter server '" << self << "' restored shard " << s << " of "
                       << shards << ", which lost every replica, from the checkpoint at clock "
                       << layout->clock << " under " << options.checkpoint_dir
                       << ": it rolled back at least " << (clock - layout->clock)
                       << " clocks (its trainers were at clock " << clock
                       << " or later; their requests move it on)";
  Adopt(*map);
}

void PsServer::State::TakeCut(int64_t shard, const std::string& table, int64_t clock) {
  std::shared_ptr<Shard> held;
  int64_t shards = 0;
  {
    MutexLock lock(&mu_);
    auto r = replicas_.find(shard);
    if (r == replicas_.end() || r->second.role != ReplicaRole::kPrimary) return;
    auto t = r->second.tables.find(table);
    if (t == r->second.tables.end()) return;
    held = t->second;
    shards = map_.shards();
  }
  if (held->HeldCut() != clock) return;  // taken already (a promotion raced the news)
  const absl::Time started = absl::Now();
  int64_t cut = 0;
  // Nothing changes the rows while the cut is held: the copy is the cut's.
  const ShardSnapshot rows = held->Snapshot(&cut);
  const absl::Status written =
      WriteShardCheckpoint(options.checkpoint_dir, held->table(), shard, shards, clock, rows);
  if (written.ok()) {
    TESSERA_LOG(INFO) << "parameter server '" << self << "' wrote table '" << table << "' shard "
                      << shard << " at clock " << clock << " (" << rows.rows() << " rows, "
                      << rows.bytes() << " bytes) in "
                      << absl::FormatDuration(absl::Now() - started);
  } else {
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' could not write table '" << table
                         << "' shard " << shard << " at clock " << clock << ": " << written;
  }
  // Released either way: training does not wait on a disk that failed.
  auto logged = held->Release(clock, written.ok());
  if (!logged.ok()) return;
  Changes changes;
  changes.Add(table, *logged,
              ShardOp{ShardOp::Kind::kRelease, {}, written.ok() ? 1 : 0, clock, {}, {}});
  if (!changes.message.tables.empty()) {
    Replicate(shard, std::move(changes.message), changes.wait);
  }
}

void PsServer::State::RecordProgress() {
  if (options.checkpoint_dir.empty()) return;
  std::map<int64_t, int64_t> moved;  // shard -> clock
  int64_t shards = 0;
  {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now < record_after_) return;
    for (const auto& [s, r] : replicas_) {
      if (r.role != ReplicaRole::kPrimary) continue;
      int64_t clock = 0;
      for (const auto& [name, shard] : r.tables) clock = std::max(clock, shard->Stats().clock);
      auto last = recorded_.find(s);
      if (last != recorded_.end() && last->second == clock) continue;
      moved[s] = clock;
      recorded_[s] = clock;
    }
    if (moved.empty()) return;
    record_after_ = now + kProgressEvery;
    shards = map_.shards();
  }
  for (const auto& [s, clock] : moved) {
    if (auto recorded = ps::RecordProgress(options.checkpoint_dir, s, shards, clock);
        !recorded.ok()) {
      TESSERA_LOG(WARNING) << "parameter server '" << self << "': " << recorded;
    }
  }
}

void ServeCheckpoints(const std::shared_ptr<PsServer::State>& state) {
  rpc::Registry& registry = state->runtime->registry();
  rpc::Serve<CutRequest>(registry, [state](rpc::CallContext&, CutRequest m) {
    using Agreed = std::vector<int64_t>;
    if (state->options.checkpoint_dir.empty()) {
      return Future<Agreed>::Ready(absl::FailedPreconditionError(
          absl::StrCat("parameter server '", state->self,
                       "' takes no checkpoints: its PsOptions::checkpoint_dir is empty")));
    }
    Changes changes;
    Agreed agreed;
    for (const std::string& table : m.tables) {
      auto shard = state->RouteToPrimary(table, m.epoch, m.shard);
      if (!shard.ok()) return Future<Agreed>::Ready(shard.status());
      int64_t at = 0;
      auto logged = (*shard)->Cut(m.clock, &at);
      if (!logged.ok()) return Future<Agreed>::Ready(logged.status());
      changes.Add(table, *logged, ShardOp{ShardOp::Kind::kCut, {}, 0, m.clock, {}, {}});
      agreed.push_back(at);
    }
    if (changes.wait == 0) return Future<Agreed>::Ready(agreed);
    return state->Replicate(m.shard, std::move(changes.message), changes.wait)
        .Then([agreed](const absl::StatusOr<Void>& replicated) -> absl::StatusOr<Agreed> {
          if (!replicated.ok()) return replicated.status();
          return agreed;
        });
  });
  rpc::Serve<SavedRequest>(registry, [state](rpc::CallContext&, SavedRequest m) {
    std::vector<Future<Void>> saved;
    for (const std::string& table : m.tables) {
      auto shard = state->RouteToPrimary(table, m.epoch, m.shard);
      if (!shard.ok()) return Future<Void>::Ready(shard.status());
      saved.push_back((*shard)->Saved(m.clock));
    }
    return WhenAllOk(saved).Then([](const absl::StatusOr<bool>& all) -> absl::StatusOr<Void> {
      if (!all.ok()) return all.status();
      return Void{};
    });
  });
}

}  // namespace tessera::ps
