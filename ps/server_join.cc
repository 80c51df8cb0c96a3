// PsServer::State's re-replication (see Note [Parameter-server replication],
// ps/ps_server.h): a server joins a shard short of backups — copy, catch
// up, serve — while the shard's primary goes on serving trainers.
//
//   joiner                                  primary
//   JoinRequest ─────────────────────────▶  joining += joiner; start = last change
//                                           every change from now on is sent to it too
//                ◀───────────────────────── InstallRequest per table (Snapshot at its cut)
//   Restore each; once all are held,
//   follow from start + 1 (skipping, per
//   table, what its snapshot holds)  ─────▶ the joiner's last change
//                                           shard map += joiner (compare-and-set)
//                ◀───────────────────────── JoinRequest answered
//
// The joiner's log holds back the changes that arrive before the snapshots
// (OpLog::Hold); a change numbered after `start` reached it, because the
// primary reads the joiners under the same lock after numbering it. A
// table's snapshot holds exactly its changes up to its cut (Shard::Snapshot
// reads the number under the table's lock, where changes are numbered), so
// every change is made once on the joiner: in a snapshot or replayed. The
// primary waits for nobody's confirmation until the map names the joiner;
// then for its, like any backup's.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/server_state.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"

namespace tessera::ps {

namespace {

using Void = std::monostate;

// A part of a snapshot (64 MiB) takes well under a second to send and
// restore, but a loaded machine may take far longer than the failure
// timeout: the deadline of each part, and how long a joiner waits for the
// next word from its primary before it gives the join up. Progress, not the
// whole copy, is timed: a shard of any size can join.
constexpr absl::Duration kJoinTimeout = absl::Minutes(5);
// The rows of one InstallRequest: a 1 GiB shard goes in 16 parts.
constexpr int64_t kPartBytes = 64 << 20;

// Sends a joiner every table's snapshot (taken already), part after part,
// each once the last was answered; completes with the joiner's last change.
struct Installer : std::enable_shared_from_this<Installer> {
  rpc::Runtime* runtime = nullptr;
  std::string joiner;
  std::vector<InstallRequest> tables;  // each with its whole snapshot
  size_t table = 0;
  int64_t first_row = 0;
  Promise<int64_t> done;

  Future<int64_t> Send() {
    Future<int64_t> result = done.GetFuture();
    Next(0);
    return result;
  }
  void Next(int64_t last) {
    if (table == tables.size()) {
      done.Set(last);
      return;
    }
    const InstallRequest& whole = tables[table];
    const ShardSnapshot& snapshot = whole.snapshot;
    const int64_t rows = snapshot.rows();
    const int64_t row_bytes = std::max<int64_t>(1, snapshot.bytes() / std::max<int64_t>(1, rows));
    InstallRequest part = whole;  // its fields; the snapshot's tensors are shared, not copied
    part.first_row = first_row;
    if (first_row < rows) {
      const int64_t n = std::min(rows - first_row, std::max<int64_t>(1, kPartBytes / row_bytes));
      part.snapshot = snapshot.Rows(first_row, n);
      first_row += n;
    } else {
      part.snapshot = snapshot.WithoutRows();
      part.last = true;
      ++table;
      first_row = 0;
    }
    auto self = shared_from_this();
    runtime
        ->CallAsync(joiner, InstallRequest::kService, rpc::EncodeMessage(std::move(part)),
                    rpc::CallOptions(kJoinTimeout))
        .OnReady([self](const absl::StatusOr<c10::IValue>& answer) {
          if (!answer.ok()) {
            self->done.Set(answer.status());
          } else if (!answer->isInt()) {
            self->done.Set(absl::InternalError("a joiner answered an install with no change"));
          } else {
            self->Next(answer->toInt());
          }
        });
  }
};

}  // namespace

// --- the joiner ---

std::vector<std::shared_ptr<OpLog>> PsServer::State::DropReplicasLocked() {
  std::vector<std::shared_ptr<OpLog>> dropped;
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    if (it->second.role != ReplicaRole::kNone) {
      ++it;
      continue;
    }
    TESSERA_LOG(INFO) << "parameter server '" << self << "' drops its replica of shard "
                      << it->first << " (shard map epoch " << map_.epoch
                      << " no longer names it there)";
    dropped.push_back(it->second.log);
    it = replicas_.erase(it);
  }
  return dropped;
}

int64_t PsServer::State::ShardToJoinLocked() const {
  if (absl::Now() < join_after_) return -1;
  for (const auto& [s, r] : replicas_) {
    if (r.role == ReplicaRole::kJoining) return -1;  // one at a time
  }
  // The servers that may join, as this server sees them: live ones.
  std::map<std::string, std::string> live;  // name -> host
  for (const rpc::Member& member : runtime->membership().Members()) {
    if (member.state == rpc::MemberState::kLive) live[member.info.name] = HostOf(member.info);
  }
  const size_t wanted = 1 + static_cast<size_t>(options.backups);
  const auto& servers = map_.servers;  // those the job started with, then any added
  for (int64_t s = 0; s < map_.shards(); ++s) {
    const std::vector<std::string>& replicas = map_.replicas[s];
    if (replicas.empty() || replicas.size() >= wanted || replicas_.count(s) > 0 ||
        map_.HoldsReplica(s, self)) {
      continue;  // lost (a checkpoint's to restore), full, or this server's already
    }
    // The first choices: live servers that hold none of it, those on
    // another host than its primary first, then in order after it.
    const std::string primary_host = live.count(replicas[0]) ? live[replicas[0]] : "";
    const size_t first = std::find(servers.begin(), servers.end(), replicas[0]) - servers.begin();
    std::vector<std::pair<bool, std::string>> choices;  // same host as the primary, name
    for (size_t i = 1; i <= servers.size(); ++i) {
      const std::string& server = servers[(first + i) % servers.size()];
      auto host = live.find(server);
      if (host == live.end() || map_.HoldsReplica(s, server)) continue;
      choices.emplace_back(host->second == primary_host, server);
    }
    std::stable_sort(choices.begin(), choices.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t missing = wanted - replicas.size();
    for (size_t i = 0; i < choices.size() && i < missing; ++i) {
      if (choices[i].second == self) return s;
    }
  }
  return -1;
}

void PsServer::State::Rejoin() {
  std::vector<int64_t> stalled;
  {
    MutexLock lock(&mu_);
    for (const auto& [s, r] : replicas_) {
      if (r.role == ReplicaRole::kJoining && absl::Now() - r.heard > kJoinTimeout) {
        stalled.push_back(s);
      }
    }
  }
  for (int64_t s : stalled) {
    GiveUpJoin(s, absl::StrCat("gives up joining shard ", s, ": its primary said nothing for ",
                               absl::FormatDuration(kJoinTimeout)));
  }
  std::vector<std::shared_ptr<OpLog>> dropped;
  JoinRequest request;
  std::string primary;
  {
    MutexLock lock(&mu_);
    dropped = DropReplicasLocked();
    const int64_t s = ShardToJoinLocked();
    if (s >= 0) {
      Replica& r = replicas_[s];
      r.index = s;
      r.role = ReplicaRole::kJoining;
      r.since = map_.since[s];
      r.verified_since = r.since;  // its snapshot is the primary's own state
      r.primary = primary = map_.primary(s);
      r.heard = absl::Now();  // each part, each change from the primary, renews it
      r.log->Hold();
      for (const TableOptions& table : options.tables) {
        r.tables[table.name] = MakeShard(table, s, map_.shards(), {}, r.log);
      }
      request = JoinRequest{map_.epoch, s};
    }
  }
  // What a dropped replica still waited for will never come.
  for (const auto& log : dropped) log->Promote(absl::AbortedError("the replica was dropped"));
  if (primary.empty()) return RestoreLost();  // nothing to join: anything to restore?
  TESSERA_LOG(INFO) << "parameter server '" << self << "' joins shard " << request.shard
                    << " as a backup of '" << primary << "' (shard map epoch " << request.epoch
                    << ")";
  std::weak_ptr<State> weak = weak_from_this();
  const int64_t shard = request.shard;
  // Answered once the primary began copying: the map names this server a
  // backup when the copy is done (TakeRoleLocked).
  runtime
      ->CallAsync(primary, JoinRequest::kService, rpc::EncodeMessage(request),
                  rpc::CallOptions(kJoinTimeout))
      .OnReady([weak, shard, primary](const absl::StatusOr<c10::IValue>& answer) {
        auto self = weak.lock();
        if (!self || answer.ok()) return;
        self->GiveUpJoin(shard, absl::StrCat("could not join shard ", shard, " as a backup of '",
                                             primary, "': ", answer.status().ToString()));
      });
}

void PsServer::State::GiveUpJoin(int64_t shard, const std::string& why) {
  TESSERA_LOG(WARNING) << "parameter server '" << self << "' " << why;
  MutexLock lock(&mu_);
  join_after_ = absl::Now() + options.failure_timeout;
  if (auto it = replicas_.find(shard);
      it != replicas_.end() && it->second.role == ReplicaRole::kJoining) {
    it->second.role = ReplicaRole::kNone;  // dropped at the next tick
  }
}

absl::StatusOr<int64_t> PsServer::State::Install(const rpc::CallContext& ctx,
                                                 const InstallRequest& m) {
  std::shared_ptr<Shard> shard;
  std::shared_ptr<OpLog> log;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(m.shard);
    const std::string caller = NameOf(ctx.caller_rank);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kJoining ||
        it->second.primary != caller) {
      return absl::AbortedError(absl::StrCat("parameter server '", self, "' is not joining shard ",
                                             m.shard, " of '", caller, "' (shard map epoch ",
                                             map_.epoch, ")"));
    }
    it->second.heard = absl::Now();
    auto t = it->second.tables.find(m.table);
    if (t == it->second.tables.end() || it->second.installed.count(m.table) > 0 ||
        m.cut < m.start) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter server '", self, "': a snapshot of table '", m.table, "' shard ",
                       m.shard, " at change ", m.cut, " (from ", m.start,
                       "): no such table, held already, or cut early"));
    }
    shard = t->second;
    log = it->second.log;
  }
  // Outside the lock: a large shard takes a while to copy in.
  if (auto ok = shard->Restore(m.snapshot, m.first_row, m.last, m.cut); !ok.ok()) return ok;
  if (!m.last) return log->last();
  bool all = false;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(m.shard);
    if (it == replicas_.end() || it->second.log != log) {
      return absl::AbortedError(
          absl::StrCat("parameter server '", self, "' stopped joining shard ", m.shard));
    }
    it->second.installed.insert(m.table);
    all = it->second.installed.size() == it->second.tables.size();
  }
  if (all) log->StartAt(m.start);
  return log->last();
}

// --- the primary ---

Future<Void> PsServer::State::AddBackup(const rpc::CallContext& ctx, const JoinRequest& m) {
  const std::string joiner = NameOf(ctx.caller_rank);
  // A server added to the job (PsServer::Join) may ask before this one read
  // the map that names it: read it once more.
  if (!IsServer(joiner)) Refresh();
  if (!IsServer(joiner)) {
    return Future<Void>::Ready(absl::PermissionDeniedError(
        absl::StrCat("parameter server '", self, "': '", joiner, "' is not a server of the job")));
  }
  InstallRequest base;
  std::map<std::string, std::shared_ptr<Shard>> tables;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(m.shard);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary) {
      return Future<Void>::Ready(absl::AbortedError(
          absl::StrCat("parameter server '", self, "' is not the primary of shard ", m.shard,
                       " at shard map epoch ", map_.epoch)));
    }
    if (map_.HoldsReplica(m.shard, joiner) ||
        map_.replicas[m.shard].size() >= 1 + static_cast<size_t>(options.backups)) {
      return Future<Void>::Ready(absl::FailedPreconditionError(
          absl::StrCat("parameter server '", self, "': shard ", m.shard, " needs no backup '",
                       joiner, "' at shard map epoch ", map_.epoch)));
    }
    // From here on every change is sent to the joiner too (Replicate).
    it->second.joining.insert(joiner);
    base.epoch = map_.epoch;
    base.shard = m.shard;
    base.start = it->second.log->last();
    tables = it->second.tables;
  }
  auto sender = std::make_shared<Installer>();
  sender->runtime = runtime;
  sender->joiner = joiner;
  int64_t bytes = 0;
  for (const auto& [name, shard] : tables) {
    InstallRequest install = base;
    install.table = name;
    install.snapshot = shard->Snapshot(&install.cut);
    bytes += install.snapshot.bytes();
    sender->tables.push_back(std::move(install));
  }
  TESSERA_LOG(INFO) << "parameter server '" << self << "' copies shard " << m.shard << " (" << bytes
                    << " bytes, from change " << base.start << ") to '" << joiner << "'";
  std::weak_ptr<State> weak = weak_from_this();
  const int64_t shard = m.shard;
  sender->Send().OnReady([weak, shard, joiner](const absl::StatusOr<int64_t>& last) {
    auto self = weak.lock();
    ThreadPool* pool = self ? self->runtime->live_executor() : nullptr;
    if (!last.ok() || pool == nullptr) {
      if (!self) return;
      TESSERA_LOG(WARNING) << "parameter server '" << self->self << "' could not copy shard "
                           << shard << " to '" << joiner << "': "
                           << (last.ok() ? absl::CancelledError("shutting down") : last.status());
      MutexLock lock(&self->mu_);
      if (auto it = self->replicas_.find(shard); it != self->replicas_.end()) {
        it->second.joining.erase(joiner);
      }
      return;
    }
    // The map is changed in the store: on the pool.
    pool->Post([self, shard, joiner, last = *last] { self->RecordBackup(shard, joiner, last); });
  });
  // Answered now: the joiner times the copy by its parts, not as a whole.
  return Future<Void>::Ready(Void{});
}

void PsServer::State::RecordBackup(int64_t shard, const std::string& joiner, int64_t last) {
  const size_t wanted = 1 + static_cast<size_t>(options.backups);
  auto changed = ChangeShardMap(runtime->store(), options.job, [&](const ShardMap& m) {
    return WithBackup(m, shard, self, joiner, wanted);
  });
  if (changed.ok()) Adopt(*changed);
  std::shared_ptr<OpLog> log;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it != replicas_.end()) {
      it->second.joining.erase(joiner);
      if (it->second.role == ReplicaRole::kPrimary) log = it->second.log;
    }
  }
  if (!changed.ok() || log == nullptr || !changed->HoldsReplica(shard, joiner)) {
    // The joiner, hearing nothing more, gives the join up (Rejoin).
    TESSERA_LOG(WARNING) << "parameter server '" << self << "' could not add '" << joiner
                         << "' to shard " << shard << ": "
                         << (changed.ok() ? absl::StrCat("shard map epoch ", changed->epoch,
                                                         " changed it otherwise")
                                          : changed.status().ToString());
    return;
  }
  log->Confirm(joiner, last);  // outside the lock: releases waits
  TESSERA_LOG(INFO) << "parameter server '" << self << "': '" << joiner << "' is a backup of shard "
                    << shard << " from shard map epoch " << changed->epoch;
}

}  // namespace tessera::ps
