// PsServer::State's messages between a shard's replicas (see Note
// [Parameter-server replication], ps/ps_server.h): the primary's changes
// and heartbeats to its backups and what it learns from their answers, the
// backups' side of both, and the failure detection that drives failover.
// The roles and routing are in ps/server_state.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/server_state.h"
#include "rpc/internal_service.h"

namespace tessera::ps {

namespace {

using Void = std::monostate;

// Whether a backup's refusal says this server's view of the map is old.
bool RouteAgain(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted ||
         status.code() == absl::StatusCode::kPermissionDenied;
}

// Whether a backup's answer is no answer: it, or the way to it, failed or
// is slower than the changes (a full queue to it: ResourceExhausted).
bool Silent(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kCancelled;
}

}  // namespace

// Note [Replication batches]: a primary has at most one message of
// changes in flight to each backup (and joiner); the changes made while it
// is are kept in the backup's outbox and sent together, in one message,
// once it answers — group commit. Under load, then, a backup gets about
// one message a round trip, whatever the number of trainers pushing (200
// pushes sent at once reached a backup in 3 messages: ps_test), where it
// got one a push; every message costs both servers its encoding, its send
// and its wake-ups, on cores the trainers share. Nothing waits for a batch
// to fill: a change made while no message is in flight goes at once, and
// so does one numbered before a change already sent (the backup answers a
// message once it applied its changes, in their numbers' order: held back,
// that change would hold the message in flight up until its deadline).
// The backup applies a batch's changes in order (OpLog::Follow), as it
// does any message's, and its answer confirms them all. A message that went
// unanswered is sent again on its own (SendAgain) while the outbox goes
// on; a backup that leaves the shard, or a primary that stops leading it,
// drops its outbox: its changes' waits are failed or released with the
// map (OpLog::FailWaits, SetBackups), as before.
namespace {

// Appends the changes of `more` to `batch`.
void AppendChanges(const ReplicateRequest& more, ReplicateRequest* batch) {
  auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
  append(batch->tables, more.tables);
  append(batch->lsns, more.lsns);
  append(batch->kinds, more.kinds);
  append(batch->ranks, more.ranks);
  append(batch->incarnations, more.incarnations);
  append(batch->sequences, more.sequences);
  append(batch->clocks, more.clocks);
  append(batch->keys, more.keys);
  append(batch->grads, more.grads);
}

}  // namespace

void PsServer::State::StampLocked(const Replica& r, ReplicateRequest* message) const {
  message->epoch = map_.epoch;
  message->shard = r.index;
  message->base = r.base;
}

Future<Void> PsServer::State::Replicate(int64_t shard, ReplicateRequest message, int64_t wait) {
  struct Send {
    std::string backup;
    Sent kind;
    ReplicateRequest changes;
  };
  std::vector<Send> sends;
  std::shared_ptr<OpLog> log;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end()) {
      return Future<Void>::Ready(absl::InternalError("replicating a shard not held"));
    }
    Replica& r = it->second;
    StampLocked(r, &message);
    std::vector<std::string> backups = r.backups;
    for (const std::string& joiner : r.joining) {
      if (std::find(backups.begin(), backups.end(), joiner) == backups.end()) {
        backups.push_back(joiner);
      }
    }
    // Numbered before a change already sent, this one goes now (see Note
    // [Replication batches]).
    const auto fills_a_gap_below = [&message](const Replica::Outbox& outbox) {
      return std::any_of(message.lsns.begin(), message.lsns.end(),
                         [&outbox](int64_t lsn) { return lsn < outbox.sent_through; });
    };
    for (const std::string& backup : backups) {
      Replica::Outbox& outbox = r.outboxes[backup];
      if (outbox.in_flight && !fills_a_gap_below(outbox)) {
        // Its answer confirms what it carries; these go after it.
        AppendChanges(message, &outbox.waiting);
        continue;
      }
      const Sent kind = outbox.in_flight ? Sent::kBeside : Sent::kBatch;
      outbox.in_flight = true;
      ++r.messages_sent;
      for (int64_t lsn : message.lsns) outbox.sent_through = std::max(outbox.sent_through, lsn);
      sends.push_back({backup, kind, message});
    }
    log = r.log;
  }
  Future<Void> done = log->Replicated(wait);
  for (Send& send : sends) {
    SendToBackup(shard, send.backup, ReplicateRequest::kService,
                 rpc::EncodeMessage(std::move(send.changes)), log, send.kind);
  }
  return done;
}

void PsServer::State::SendWaiting(int64_t shard, const std::string& backup,
                                  const std::shared_ptr<OpLog>& log) {
  ReplicateRequest batch;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end()) return;
    Replica& r = it->second;
    auto outbox = r.outboxes.find(backup);
    if (outbox == r.outboxes.end()) return;
    if (r.role != ReplicaRole::kPrimary || r.log != log ||
        (std::find(r.backups.begin(), r.backups.end(), backup) == r.backups.end() &&
         r.joining.count(backup) == 0)) {
      r.outboxes.erase(outbox);
      return;
    }
    if (outbox->second.waiting.lsns.empty()) {
      outbox->second.in_flight = false;
      return;
    }
    batch = std::exchange(outbox->second.waiting, ReplicateRequest{});
    ++r.messages_sent;
    for (int64_t lsn : batch.lsns) {
      outbox->second.sent_through = std::max(outbox->second.sent_through, lsn);
    }
    StampLocked(r, &batch);
  }
  SendToBackup(shard, backup, ReplicateRequest::kService, rpc::EncodeMessage(std::move(batch)), log,
               Sent::kBatch);
}

void PsServer::State::SendToBackup(int64_t shard, const std::string& backup, const char* service,
                                   std::vector<c10::IValue> message,
                                   const std::shared_ptr<OpLog>& log, Sent kind) {
  const absl::Time sent = absl::Now();
  std::weak_ptr<State> weak = weak_from_this();
  const bool heartbeat = kind == Sent::kHeartbeat;
  // Changes are kept to be sent again (IValues share their tensors).
  std::vector<c10::IValue> again = heartbeat ? std::vector<c10::IValue>{} : message;
  runtime->CallAsync(backup, service, std::move(message), rpc::CallOptions(options.failure_timeout))
      .OnReady([weak, shard, backup, service, sent, log, kind, heartbeat,
                again](const absl::StatusOr<c10::IValue>& answer) mutable {
        auto self = weak.lock();
        if (!self) return;
        // Either answer says how far the backup got.
        if (answer.ok() && answer->isInt()) log->Confirm(backup, answer->toInt());
        if (heartbeat) {
          MutexLock lock(&self->mu_);
          if (auto it = self->replicas_.find(shard); it != self->replicas_.end()) {
            it->second.beating.erase(backup);
          }
        }
        self->Answered(shard, backup, sent, answer.status());
        if (!heartbeat && Silent(answer.status())) {
          self->SendAgain(shard, backup, service, std::move(again), log);
        }
        if (kind == Sent::kBatch) self->SendWaiting(shard, backup, log);
      });
}

// A change a backup did not confirm may not have reached it (a queue full,
// a deadline passed on the way, a connection reset): without it, every
// later change would wait on the backup for the gap. Sent again, after a
// heartbeat's pause, until the backup confirms it (a repeat is answered at
// once: OpLog::Follow) or leaves the shard, or this server stops leading it.
void PsServer::State::SendAgain(int64_t shard, const std::string& backup, const char* service,
                                std::vector<c10::IValue> message,
                                const std::shared_ptr<OpLog>& log) {
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary ||
        it->second.log != log) {
      return;
    }
    const Replica& r = it->second;
    if (std::find(r.backups.begin(), r.backups.end(), backup) == r.backups.end() &&
        r.joining.count(backup) == 0) {
      return;
    }
    // Routed by today's map (ReplicateRequest's first field): the backup
    // turns away an epoch older than its shard's replicas.
    message[0] = c10::IValue(map_.epoch);
  }
  std::weak_ptr<State> weak = weak_from_this();
  runtime->timer().Schedule(
      absl::Now() + heartbeat, [weak, shard, backup, service, message, log]() mutable {
        auto self = weak.lock();
        ThreadPool* pool = self ? self->runtime->live_executor() : nullptr;
        if (pool == nullptr) return;
        pool->Post([self, shard, backup, service, message, log]() mutable {
          self->SendToBackup(shard, backup, service, std::move(message), log, Sent::kBeside);
        });
      });
}

void PsServer::State::SendHeartbeats(int64_t shard, bool idle) {
  HeartbeatRequest message;
  std::vector<std::string> backups;
  std::shared_ptr<OpLog> log;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary) return;
    message = HeartbeatRequest{map_.epoch, shard, it->second.base, idle};
    // One heartbeat at a time to each: a silent backup is not sent more.
    for (const std::string& backup : it->second.backups) {
      if (it->second.beating.insert(backup).second) backups.push_back(backup);
    }
    log = it->second.log;
  }
  for (const std::string& backup : backups) {
    SendToBackup(shard, backup, HeartbeatRequest::kService, rpc::EncodeMessage(message), log,
                 Sent::kHeartbeat);
  }
}

void PsServer::State::Answered(int64_t shard, const std::string& backup, absl::Time sent,
                               const absl::Status& answer) {
  Replica::LeaseWaits leased;
  bool remove = false;
  {
    MutexLock lock(&mu_);
    auto it = replicas_.find(shard);
    if (it == replicas_.end() || it->second.role != ReplicaRole::kPrimary) return;
    Replica& r = it->second;
    if (std::find(r.backups.begin(), r.backups.end(), backup) == r.backups.end()) {
      return;  // a joiner: its install's failure ends its join (AddBackup)
    }
    absl::Time& answered = r.answered[backup];
    if (answer.ok()) {
      answered = std::max(answered, sent);
      if (absl::Now() < r.LeaseEnd(lease)) leased.swap(r.lease_waits);
    } else if (!RouteAgain(answer)) {
      // Silent past the failure timeout, or any refusal but a routing one:
      // a backup that did not take a change its primary made diverged.
      // Not once the job shuts down: this server's own agent, closing,
      // refuses the call (FailedPrecondition), which is no verdict on the backup.
      remove = (!Silent(answer) || absl::Now() - answered > options.failure_timeout) &&
               !runtime->shutting_down();
    }
  }
  ReleaseLeaseWaits(leased, absl::OkStatus());
  if (answer.ok()) return;
  ThreadPool* pool = runtime->live_executor();
  if (pool == nullptr) return;
  std::weak_ptr<State> weak = weak_from_this();
  if (RouteAgain(answer)) {
    pool->Post([weak] {
      if (auto self = weak.lock()) self->Refresh();
    });
  } else if (remove) {
    // A backup that diverged on this shard leaves this shard alone; one
    // that is silent is taken for failed.
    const bool diverged = !Silent(answer);
    const std::string why = absl::StrCat(diverged ? "diverged" : "did not answer",
                                         " as a backup of shard ", shard, ": ", answer.message());
    pool->Post([weak, backup, why, shard, diverged] {
      if (auto self = weak.lock()) self->Remove(backup, why, diverged ? shard : -1);
    });
  }
}

absl::StatusOr<Replica*> PsServer::State::FromPrimaryLocked(const std::string& caller,
                                                            int64_t epoch, int64_t shard) {
  auto it = replicas_.find(shard);
  if (it == replicas_.end() ||
      (it->second.role != ReplicaRole::kBackup && it->second.role != ReplicaRole::kJoining)) {
    return absl::AbortedError(absl::StrCat("parameter server '", self,
                                           "' is not a backup of shard ", shard,
                                           " at shard map epoch ", map_.epoch));
  }
  Replica& r = it->second;
  if (epoch < r.since || caller != r.primary) {
    // A primary that was cut off or paused, and replaced: fenced.
    return absl::AbortedError(absl::StrCat("'", caller, "' is not the primary of shard ", shard,
                                           ": shard map epoch ", map_.epoch, " made '", r.primary,
                                           "' its primary; '", self, "' refuses the changes of '",
                                           caller, "' (epoch ", epoch, ")"));
  }
  return &r;
}

absl::Status PsServer::State::Heard(const rpc::CallContext& ctx, int64_t epoch, int64_t shard,
                                    int64_t base, bool idle, int64_t* last) {
  if (epoch > Epoch()) Refresh();
  MutexLock lock(&mu_);
  TESSERA_ASSIGN_OR_RETURN(auto r, FromPrimaryLocked(NameOf(ctx.caller_rank), epoch, shard));
  if (r->verified_since < r->since) {
    if (r->log->last() != base) {
      return absl::FailedPreconditionError(absl::StrCat("parameter server '", self, "' made ",
                                                        r->log->last(), " changes to shard ", shard,
                                                        ", its new primary ", base, ": diverged"));
    }
    r->verified_since = r->since;
  }
  r->heard = absl::Now();
  r->primary_idle = idle;
  *last = r->log->last();
  return absl::OkStatus();
}

Future<Void> PsServer::State::Follow(const rpc::CallContext& ctx, ReplicateRequest m) {
  const size_t n = m.tables.size();
  for (size_t size : {m.lsns.size(), m.kinds.size(), m.ranks.size(), m.incarnations.size(),
                      m.sequences.size(), m.clocks.size(), m.keys.size(), m.grads.size()}) {
    if (size != n) {
      return Future<Void>::Ready(absl::InvalidArgumentError(
          absl::StrCat("a replication message of ", n, " changes with a field of ", size)));
    }
  }
  int64_t last = 0;
  if (auto heard = Heard(ctx, m.epoch, m.shard, m.base, false, &last); !heard.ok()) {
    return Future<Void>::Ready(heard);
  }
  std::vector<std::function<absl::Status()>> changes;
  std::shared_ptr<OpLog> log;
  int64_t term = 0;
  bool joining = false;
  {
    MutexLock lock(&mu_);
    auto r = FromPrimaryLocked(NameOf(ctx.caller_rank), m.epoch, m.shard);
    if (!r.ok()) return Future<Void>::Ready(r.status());
    for (size_t i = 0; i < n; ++i) {
      auto t = (*r)->tables.find(m.tables[i]);
      if (t == (*r)->tables.end() || m.kinds[i] < 0 || m.kinds[i] > ShardOp::kLastKind) {
        return Future<Void>::Ready(absl::InvalidArgumentError(absl::StrCat(
            "a replication message of table '", m.tables[i], "' and kind ", m.kinds[i])));
      }
      ShardOp op{static_cast<ShardOp::Kind>(m.kinds[i]),
                 Sender{static_cast<int>(m.ranks[i]), m.incarnations[i]},
                 m.sequences[i],
                 m.clocks[i],
                 m.keys[i],
                 m.grads[i]};
      std::shared_ptr<Shard> shard = t->second;
      changes.push_back([shard, op, lsn = m.lsns[i]] { return shard->Replay(op, lsn); });
    }
    log = (*r)->log;
    term = (*r)->since;
    joining = (*r)->role == ReplicaRole::kJoining;
  }
  // Outside the lock (the changes complete futures inline); the log itself
  // refuses them should this replica have been promoted meanwhile.
  std::vector<Future<Void>> applied;
  for (size_t i = 0; i < n; ++i) applied.push_back(log->Follow(term, m.lsns[i], changes[i]));
  // A joiner holds changes back until it holds the snapshots, and its
  // primary waits for none of its answers: taken is enough (an open call
  // per change held would fill its queue during a long copy). Once it holds
  // them it answers as a backup does, once applied: the primary then knows
  // how far it got when the map names it, and waits for nothing more.
  if (joining && log->held()) return Future<Void>::Ready(Void{});
  return WhenAllOk(applied).Then([](const absl::StatusOr<bool>& all) -> absl::StatusOr<Void> {
    if (!all.ok()) return all.status();
    return Void{};
  });
}

absl::StatusOr<std::vector<int64_t>> PsServer::State::Digest(const std::string& table,
                                                             int64_t shard) const {
  MutexLock lock(&mu_);
  auto it = replicas_.find(shard);
  if (it == replicas_.end()) {
    return absl::NotFoundError(
        absl::StrCat("parameter server '", self, "' holds no replica of shard ", shard));
  }
  auto t = it->second.tables.find(table);
  if (t == it->second.tables.end()) {
    return absl::NotFoundError(
        absl::StrCat("parameter server '", self, "' has no table '", table, "'"));
  }
  return std::vector<int64_t>{it->second.log->last(), static_cast<int64_t>(t->second->Digest()),
                              t->second->Stats().rows};
}

int64_t PsServer::State::MessagesSent(int64_t shard) const {
  MutexLock lock(&mu_);
  auto it = replicas_.find(shard);
  return it == replicas_.end() ? 0 : it->second.messages_sent;
}

int64_t PsServer::State::LastChange(int64_t shard) const {
  MutexLock lock(&mu_);
  auto it = replicas_.find(shard);
  return it == replicas_.end() ? 0 : it->second.log->last();
}

void PsServer::State::Tick() {
  if (runtime->live_executor() == nullptr) return;
  Refresh();
  std::vector<std::pair<int64_t, bool>> heartbeats;     // shard, idle
  std::vector<std::pair<std::string, int64_t>> silent;  // primary, shard
  {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (auto& [s, r] : replicas_) {
      if (r.role == ReplicaRole::kPrimary && !r.backups.empty()) {
        const bool busy = now < r.busy_until;
        if (busy || !r.told_idle) heartbeats.emplace_back(s, !busy);
        r.told_idle = !busy;
      }
      if (r.role == ReplicaRole::kBackup && !r.primary_idle &&
          now - r.heard > options.failure_timeout) {
        silent.emplace_back(r.primary, s);
      }
    }
  }
  for (const auto& [shard, idle] : heartbeats) SendHeartbeats(shard, idle);
  for (const auto& [primary, shard] : silent) {
    Remove(primary, absl::StrCat("said nothing as the primary of shard ", shard, " for ",
                                 absl::FormatDuration(options.failure_timeout)));
  }
  Rejoin();
  RecordProgress();
  ScheduleTick();
}

void PsServer::State::ScheduleTick() {
  std::weak_ptr<State> weak = weak_from_this();
  runtime->timer().Schedule(absl::Now() + heartbeat, [weak] {
    auto self = weak.lock();
    if (!self) return;
    if (ThreadPool* pool = self->runtime->live_executor()) pool->Post([self] { self->Tick(); });
  });
}

void PsServer::State::ServerFailed(const std::string& server) {
  absl::Time when = absl::Now();
  bool concerned = false;
  {
    MutexLock lock(&mu_);
    for (const auto& [s, r] : replicas_) {
      if (r.role == ReplicaRole::kBackup && r.primary == server) {
        // Its lease, if it lives on cut off, ends first.
        concerned = true;
        when = std::max(when, r.heard + lease);
      }
      if (r.role == ReplicaRole::kPrimary &&
          std::find(r.backups.begin(), r.backups.end(), server) != r.backups.end()) {
        concerned = true;
      }
    }
  }
  if (!concerned) return;
  std::weak_ptr<State> weak = weak_from_this();
  runtime->timer().Schedule(when, [weak, server] {
    auto self = weak.lock();
    if (!self) return;
    if (ThreadPool* pool = self->runtime->live_executor()) {
      pool->Post([self, server] { self->Remove(server, "failed (its connection broke)"); });
    }
  });
}

}  // namespace tessera::ps
