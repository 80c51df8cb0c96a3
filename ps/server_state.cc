#include "ps/server_state.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"

namespace tessera::ps {

namespace {

using Void = std::monostate;

}  // namespace

std::string HostOf(const rpc::WorkerInfo& worker) {
  std::string host;
  int port = 0;
  return SplitHostPort(worker.address, &host, &port) ? host : worker.address;
}

absl::StatusOr<std::vector<int>> TrainerRanks(rpc::Runtime& runtime, const PsOptions& options,
                                              const std::vector<std::string>& servers) {
  std::vector<int> ranks;
  if (options.trainers.empty()) {
    for (const rpc::WorkerInfo& worker : runtime.workers()) {
      if (std::find(servers.begin(), servers.end(), worker.name) == servers.end()) {
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

void Changes::Add(const std::string& table, const Logged& logged, const ShardOp& op) {
  wait = std::max(wait, logged.lsn);
  if (!logged.is_new) return;
  message.tables.push_back(table);
  message.lsns.push_back(logged.lsn);
  message.kinds.push_back(static_cast<int64_t>(op.kind));
  message.ranks.push_back(op.from.rank);
  message.incarnations.push_back(op.from.incarnation);
  message.sequences.push_back(op.sequence);
  message.clocks.push_back(op.clock);
  message.keys.push_back(op.keys.defined() ? op.keys : at::empty({0}, at::kLong));
  message.grads.push_back(op.grads.defined() ? op.grads : at::empty({0}, at::kFloat));
}

PsServer::State::State(rpc::Runtime& runtime, PsOptions options)
    : runtime(&runtime),
      options(std::move(options)),
      self(runtime.self().name),
      lease(this->options.failure_timeout / 5),
      heartbeat(this->options.failure_timeout / 20) {}

void PsServer::State::Hold(const ShardMap& map, const std::vector<int>& trainers) {
  MutexLock lock(&mu_);
  map_ = map;
  // A restarted server holds nothing: its shards moved to their backups,
  // or will; it must not take up a role with empty rows.
  if (runtime->self().incarnation > 0) {
    // Its name in the map is its last incarnation's: taken out (once that
    // one's lease, should it live on cut off, has ended), it joins anew.
    bool named = false;
    for (int64_t s = 0; s < map.shards(); ++s) named = named || map.HoldsReplica(s, self);
    if (named) {
      std::weak_ptr<State> weak = weak_from_this();
      runtime->timer().Schedule(absl::Now() + lease, [weak] {
        auto self = weak.lock();
        ThreadPool* pool = self ? self->runtime->live_executor() : nullptr;
        if (pool == nullptr) return;
        pool->Post([self] {
          self->Remove(self->self,
                       absl::StrCat("restarted (incarnation ", self->runtime->self().incarnation,
                                    "), holding nothing"));
        });
      });
    }
    return;
  }
  const absl::Time now = absl::Now();
  for (int64_t s = 0; s < map.shards(); ++s) {
    const ReplicaRole role = RoleIn(map, s, self);
    if (role == ReplicaRole::kNone) continue;
    Replica& r = replicas_[s];
    r.index = s;
    r.role = role;
    r.since = map.since[s];
    r.verified_since = r.since;
    r.primary = map.primary(s);
    r.backups.assign(map.replicas[s].begin() + 1, map.replicas[s].end());
    for (const TableOptions& table : options.tables) {
      r.tables[table.name] = MakeShard(table, s, map.shards(), trainers, r.log);
    }
    r.log->SetBackups(r.backups);
    for (const std::string& backup : r.backups) r.answered[backup] = now;
    r.heard = now;
  }
}

int64_t PsServer::State::Epoch() const {
  MutexLock lock(&mu_);
  return map_.epoch;
}

ShardMap PsServer::State::Map() const {
  MutexLock lock(&mu_);
  return map_;
}

bool PsServer::State::IsServer(const std::string& name) const {
  if (std::find(options.servers.begin(), options.servers.end(), name) != options.servers.end()) {
    return true;
  }
  MutexLock lock(&mu_);
  return std::find(map_.servers.begin(), map_.servers.end(), name) != map_.servers.end();
}

std::shared_ptr<Shard> PsServer::State::PrimaryShard(const std::string& table) const {
  MutexLock lock(&mu_);
  for (const auto& [s, r] : replicas_) {
    if (r.role != ReplicaRole::kPrimary) continue;
    auto it = r.tables.find(table);
    if (it != r.tables.end()) return it->second;
  }
  return nullptr;
}

Sender PsServer::State::From(const rpc::CallContext& ctx) const {
  Sender sender{ctx.caller_rank, 0};
  if (auto info = runtime->membership().Find(ctx.caller_rank))
    sender.incarnation = info->incarnation;
  return sender;
}

std::string PsServer::State::NameOf(int rank) const {
  std::string name;
  if (!runtime->membership().NameAndRole(rank, &name)) name = absl::StrCat("rank ", rank);
  return name;
}

// --- the map ---

void PsServer::State::Refresh() {
  auto map = CurrentShardMap(runtime->store(), options.job);
  if (map.ok()) Adopt(*map);
}

// What a change of roles leaves to do once the lock is released: futures
// complete inline, and their callbacks may call back in.
struct PsServer::State::RoleChanges {
  struct Deposed {
    std::shared_ptr<OpLog> log;
    Replica::LeaseWaits waits;
    absl::Status why;
  };
  std::vector<Deposed> deposed;
  std::vector<std::pair<std::shared_ptr<OpLog>, std::vector<std::string>>> primaries;
  std::vector<std::shared_ptr<OpLog>> promoted;
  Replica::LeaseWaits leased;
  // Checkpoint cuts a promoted backup holds: {shard, table, clock}.
  std::vector<std::tuple<int64_t, std::string, int64_t>> held_cuts;
};

void PsServer::State::TakeRoleLocked(Replica& r, const ShardMap& next, absl::Time now,
                                     RoleChanges* after) {
  const int64_t s = r.index;
  const ReplicaRole role = RoleIn(next, s, self);
  const std::string& primary = next.primary(s);
  if (r.role == ReplicaRole::kJoining && role == ReplicaRole::kNone) {
    // Not named until its primary adds it; a new primary never will.
    if (primary != r.primary) r.role = ReplicaRole::kNone;
    return;
  }
  std::vector<std::string> backups;
  if (role != ReplicaRole::kNone) {
    backups.assign(next.replicas[s].begin() + 1, next.replicas[s].end());
  }
  if (r.role == ReplicaRole::kPrimary && role != ReplicaRole::kPrimary) {
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' is no longer the primary of shard "
                         << s << ": shard map epoch " << next.epoch << " made '" << primary
                         << "' its primary";
    after->deposed.push_back(
        {r.log, std::move(r.lease_waits),
         absl::AbortedError(
             absl::StrCat("parameter server '", self, "' is no longer the primary of shard ", s,
                          ": shard map epoch ", next.epoch, " made ",
                          primary.empty() ? "it lose every replica"
                                          : absl::StrCat("'", primary, "' its primary"),
                          " (route again)"))});
    r.lease_waits.clear();
  }
  if (r.role != ReplicaRole::kPrimary && role == ReplicaRole::kPrimary) {
    after->promoted.push_back(r.log);
    for (const auto& [name, shard] : r.tables) {
      if (const int64_t cut = shard->HeldCut(); cut >= 0)
        after->held_cuts.emplace_back(s, name, cut);
    }
    r.base = r.log->last();
    r.answered.clear();
    for (const std::string& backup : backups) r.answered[backup] = now;
    r.busy_until = now + options.failure_timeout / 2;
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' is the primary of shard " << s
                         << " from shard map epoch " << next.epoch << " (" << r.log->last()
                         << " changes made)";
  }
  if (r.role == ReplicaRole::kJoining && role == ReplicaRole::kBackup) {
    // A role taken, as "is the primary of" is: said at WARNING, where users look.
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' is a backup of shard " << s
                         << " from shard map epoch " << next.epoch << " (it copied the shard)";
  }
  if (role == ReplicaRole::kBackup && (r.role != ReplicaRole::kBackup || r.primary != primary)) {
    r.heard = now;
    r.primary_idle = false;
  } else if (role == ReplicaRole::kBackup) {
    // The same primary, other replicas changed: nothing to check again.
    r.verified_since = next.since[s];
  }
  if ((r.role == ReplicaRole::kPrimary) != (role == ReplicaRole::kPrimary)) r.outboxes.clear();
  r.role = role;
  r.since = next.since[s];
  // A backup added to an idle primary must hear that it is idle: named a
  // backup, it counts its primary's silence from then on, and an idle
  // primary says nothing — 3 s after a join into a job whose trainers had
  // finished, the new backup took the shard over, and the job went on
  // joining and taking over instead of shutting down. The next tick says it.
  const bool backup_added =
      role == ReplicaRole::kPrimary &&
      std::any_of(backups.begin(), backups.end(), [&r](const std::string& b) {
        return std::find(r.backups.begin(), r.backups.end(), b) == r.backups.end();
      });
  if (backup_added) r.told_idle = false;
  r.primary = primary;
  r.backups = std::move(backups);
  if (role == ReplicaRole::kPrimary) {
    // A backup just added answered its primary (it installed the shard).
    for (const std::string& backup : r.backups) r.answered.try_emplace(backup, now);
    after->primaries.emplace_back(r.log, r.backups);
    if (now < r.LeaseEnd(lease)) {
      for (auto& wait : r.lease_waits) after->leased.push_back(std::move(wait));
      r.lease_waits.clear();
    }
  }
}

void PsServer::State::Adopt(const ShardMap& next) {
  RoleChanges after;
  {
    MutexLock lock(&mu_);
    if (next.epoch <= map_.epoch) return;
    map_ = next;
    const absl::Time now = absl::Now();
    for (auto& [s, r] : replicas_) TakeRoleLocked(r, next, now, &after);
  }
  for (RoleChanges::Deposed& d : after.deposed) {
    d.log->FailWaits(d.why);
    ReleaseLeaseWaits(d.waits, d.why);
  }
  // The changes a promoted backup waited for never come: they were
  // acknowledged to no trainer (a change is, only once every backup has it).
  for (const auto& log : after.promoted) {
    log->Promote(absl::AbortedError("the shard's primary changed (route again)"));
  }
  for (auto& [log, backups] : after.primaries) log->SetBackups(backups);
  ReleaseLeaseWaits(after.leased, absl::OkStatus());
  // Its old primary reached these cuts and did not release them: taken
  // here (on the pool: a copy and a file).
  if (ThreadPool* pool = after.held_cuts.empty() ? nullptr : runtime->live_executor()) {
    std::weak_ptr<State> weak = weak_from_this();
    for (auto& [shard, table, cut] : after.held_cuts) {
      pool->Post([weak, shard = shard, table = table, cut = cut] {
        if (auto self = weak.lock()) self->TakeCut(shard, table, cut);
      });
    }
  }
  if (after.promoted.empty()) return;
  // Trainers the old primary had not yet reported gone.
  for (const rpc::Member& member : runtime->membership().Members()) {
    if (member.state == rpc::MemberState::kLive || IsServer(member.info.name)) continue;
    TrainerGone(member.info.rank, member.info.incarnation);
  }
}

void PsServer::State::Remove(const std::string& server, const std::string& why, int64_t shard) {
  const std::string& me = self;
  bool took = false;  // whether this server's change is the one recorded
  auto changed = ChangeShardMap(runtime->store(), options.job,
                                [&](const ShardMap& m) -> std::optional<ShardMap> {
                                  took = false;
                                  for (int64_t s = 0; s < m.shards(); ++s) {
                                    if (!m.HoldsReplica(s, me)) continue;
                                    std::optional<ShardMap> next = WithoutServer(m, server, shard);
                                    took = next.has_value();
                                    return next;
                                  }
                                  return std::nullopt;  // this server is the one taken out
                                });
  if (!changed.ok()) {
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' could not take '" << server
                         << "' out of the shard map (" << why << "): " << changed.status();
    return;
  }
  if (took) {
    TESSERA_LOG(WARNING) << "parameter server '" << self << "': '" << server << "' " << why
                         << "; shard map epoch " << changed->epoch << " holds it in "
                         << (shard < 0 ? std::string("no shard")
                                       : absl::StrCat("no shard ", shard));
  }
  Adopt(*changed);
}

// --- trainers' requests ---

absl::StatusOr<std::shared_ptr<Shard>> PsServer::State::RouteToPrimary(const std::string& table,
                                                                       int64_t epoch,
                                                                       int64_t shard) {
  if (epoch > Epoch()) Refresh();
  MutexLock lock(&mu_);
  if (shard < 0 || shard >= map_.shards()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter server '", self, "': no shard ",
                                                   shard, " (the map has ", map_.shards(), ")"));
  }
  auto it = replicas_.find(shard);
  if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary) {
    const std::string& primary = map_.primary(shard);
    return absl::AbortedError(
        absl::StrCat("parameter server '", self, "' is not the primary of shard ", shard,
                     " at shard map epoch ", map_.epoch,
                     primary.empty() ? " (the shard lost every replica)"
                                     : absl::StrCat(" ('", primary, "' is; route again)")));
  }
  Replica& r = it->second;
  if (epoch < r.since || epoch > map_.epoch) {
    return absl::AbortedError(
        absl::StrCat("parameter server '", self, "': a request routed by shard map epoch ", epoch,
                     " reached shard ", shard, ", whose replicas are those of epoch ", r.since,
                     " (route again)"));
  }
  auto t = r.tables.find(table);
  if (t == r.tables.end()) {
    return absl::NotFoundError(
        absl::StrCat("parameter server '", self, "' has no table '", table, "'"));
  }
  r.busy_until = absl::Now() + options.failure_timeout / 2;
  return t->second;
}

Future<Void> PsServer::State::Leased(int64_t shard) {
  Promise<Void> promise;
  Future<Void> leased = promise.GetFuture();
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary) {
      return Future<Void>::Ready(absl::AbortedError(
          absl::StrCat("parameter server '", self, "' is no longer the primary of shard ", shard,
                       " (route again)")));
    }
    if (absl::Now() < it->second.LeaseEnd(lease)) return Future<Void>::Ready(Void{});
    it->second.lease_waits.push_back(std::move(promise));
  }
  SendHeartbeats(shard);  // renews it now rather than at the next tick
  return leased;
}

void PsServer::State::TrainerGone(int rank, int64_t incarnation) {
  std::vector<std::pair<int64_t, std::map<std::string, std::shared_ptr<Shard>>>> primaries;
  {
    MutexLock lock(&mu_);
    for (const auto& [s, r] : replicas_) {
      if (r.role == ReplicaRole::kPrimary) primaries.emplace_back(s, r.tables);
    }
  }
  // Outside the lock: a trainer's end may free pulls, which complete inline.
  for (auto& [index, tables] : primaries) {
    Changes c;
    for (auto& [name, shard] : tables) {
      c.Add(name, shard->TrainerGone(rank, incarnation),
            ShardOp{ShardOp::Kind::kGone, Sender{rank, incarnation}, 0, 0, {}, {}});
    }
    if (!c.message.tables.empty()) Replicate(index, std::move(c.message), c.wait);
  }
}

void PsServer::State::Watch() {
  std::weak_ptr<State> weak = weak_from_this();
  runtime->membership().Subscribe([weak](const rpc::MembershipEvent& event) {
    auto self = weak.lock();
    if (!self) return;
    if (self->IsServer(event.name)) {
      // A server that left ended with the job; one that failed is replaced.
      if (event.kind == rpc::MembershipEventKind::kFailed) self->ServerFailed(event.name);
      return;
    }
    if (event.kind == rpc::MembershipEventKind::kFailed ||
        event.kind == rpc::MembershipEventKind::kLeft) {
      self->TrainerGone(event.rank, event.incarnation);
    }
  });
  ScheduleTick();
}

}  // namespace tessera::ps
