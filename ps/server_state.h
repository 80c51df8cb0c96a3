// PsServer::State: a parameter server's replicas and its part in keeping
// them — routing trainers' requests to the primary, sending each change to
// the backups, heartbeats and leases, failover (see Note [Parameter-server
// replication], ps/ps_server.h). The services (ps/ps_server.cc) call it.
// Its roles and routing are in ps/server_state.cc; its messages to and
// from the other replicas in ps/server_replication.cc; servers joining a
// shard as new backups in ps/server_join.cc.
//
// Thread-safety: thread-safe. Store calls (the shard map) are made on the
// runtime's pool, never under the lock and never on a transport or timer
// thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/future.h"
#include "common/mutex.h"
#include "ps/ps_messages.h"
#include "ps/ps_options.h"
#include "ps/ps_server.h"
#include "ps/replica.h"
#include "ps/shard_map.h"
#include "rpc/call_context.h"
#include "rpc/runtime.h"

namespace tessera::ps {

// Where a worker runs: its address without the port.
std::string HostOf(const rpc::WorkerInfo& worker);

// The changes a request made on a shard, to be sent to its backups, and
// the last one it waits for (Logged, ps/shard.h).
struct Changes {
  ReplicateRequest message;
  int64_t wait = 0;
  void Add(const std::string& table, const Logged& logged, const ShardOp& op);
};

// The ranks whose clocks count from the start (PsOptions::trainers: those
// named, or every worker that is not one of `servers`).
absl::StatusOr<std::vector<int>> TrainerRanks(rpc::Runtime& runtime, const PsOptions& options,
                                              const std::vector<std::string>& servers);

// Serves CutRequest and SavedRequest (ps/server_checkpoint.cc).
void ServeCheckpoints(const std::shared_ptr<PsServer::State>& state);

struct PsServer::State : std::enable_shared_from_this<PsServer::State> {
  State(rpc::Runtime& runtime, PsOptions options);

  // Makes the replicas `map` gives this server, with `trainers` counted.
  void Hold(const ShardMap& map, const std::vector<int>& trainers);
  // Starts the heartbeats and the watch on the servers' membership.
  void Watch();

  // --- trainers' requests ---
  // This server's part of `table` for a request routed by `epoch` to
  // `shard`, if it is that shard's primary; else why not (Aborted: route
  // again by the current map).
  absl::StatusOr<std::shared_ptr<Shard>> RouteToPrimary(const std::string& table, int64_t epoch,
                                                        int64_t shard);
  // Completes when this primary of `shard` holds a lease: every backup
  // answered within the lease; Aborted once it is no longer primary.
  Future<std::monostate> Leased(int64_t shard);
  // Sends the changes in `message` to `shard`'s backups; completes when
  // every backup applied the changes up to `wait`.
  Future<std::monostate> Replicate(int64_t shard, ReplicateRequest message, int64_t wait);
  // Who sent the call: its rank and, from the runtime, its incarnation.
  Sender From(const rpc::CallContext& ctx) const;

  // --- a backup's side ---
  Future<std::monostate> Follow(const rpc::CallContext& ctx, ReplicateRequest message);
  // A heartbeat (or a replication message) from the caller as `shard`'s
  // primary: sets `last` to this replica's last change.
  absl::Status Heard(const rpc::CallContext& ctx, int64_t epoch, int64_t shard, int64_t base,
                     bool idle, int64_t* last);
  absl::StatusOr<std::vector<int64_t>> Digest(const std::string& table, int64_t shard) const;
  // This replica's last change to `shard`.
  int64_t LastChange(int64_t shard) const;
  // The messages of changes to `shard` this server sent its backups as
  // primary (see Note [Replication batches]).
  int64_t MessagesSent(int64_t shard) const;

  // --- re-replication (ps/server_join.cc) ---
  // As `shard`'s primary: starts making the caller a backup of it
  // (JoinRequest): the map names it once it holds the shard.
  Future<std::monostate> AddBackup(const rpc::CallContext& ctx, const JoinRequest& m);
  // As a joiner: holds one table's snapshot (InstallRequest); answers this
  // replica's last change.
  absl::StatusOr<int64_t> Install(const rpc::CallContext& ctx, const InstallRequest& m);

  // --- checkpoints (ps/server_checkpoint.cc) ---
  // A new shard of `table`: once a cut is reached on it as primary, this
  // server takes the cut (TakeCut).
  std::shared_ptr<Shard> MakeShard(const TableOptions& table, int64_t shard, int64_t shards,
                                   std::vector<int> trainers, std::shared_ptr<OpLog> log);
  // At the job's start, before serving: every replica held resumes from
  // the latest complete checkpoint under options.checkpoint_dir, if any.
  absl::Status Resume();
  // A shard that lost every replica, whose first choice this server is,
  // restored from the latest complete checkpoint: this server its primary.
  void RestoreLost();
  // As `shard`'s primary: copies `table`'s rows at its held cut `clock`,
  // writes them, then releases the cut (see Note [Sharded checkpoints]).
  void TakeCut(int64_t shard, const std::string& table, int64_t clock);
  // As primary, under options.checkpoint_dir: records the clock of each
  // shard whose clock moved, at most once every kProgressEvery (see Note
  // [Progress records], ps/checkpoint_files.h). On the pool (a file).
  void RecordProgress();

  ShardMap Map() const;
  // Whether `name` is one of the job's servers: those it started with, and
  // those added since (the map's servers, PsServer::Join).
  bool IsServer(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  // The map's epoch, without copying the map (every request asks it).
  int64_t Epoch() const;
  std::shared_ptr<Shard> PrimaryShard(const std::string& table) const;

  rpc::Runtime* const runtime;
  const PsOptions options;
  const std::string self;
  const absl::Duration lease, heartbeat;

 private:
  struct RoleChanges;
  // Takes `next` if it is newer: each replica's role follows it.
  void Adopt(const ShardMap& next) ABSL_LOCKS_EXCLUDED(mu_);
  // `r` takes its role in `next`; what is left to do after the lock, to `after`.
  void TakeRoleLocked(Replica& r, const ShardMap& next, absl::Time now, RoleChanges* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the recorded map (on the pool: a store call).
  void Refresh();
  // Takes `server` out of every shard (or of `shard` alone), unless this
  // server no longer holds any (it would be the one cut off).
  void Remove(const std::string& server, const std::string& why, int64_t shard = -1);
  // A backup's checks of a message from `caller` as `shard`'s primary at `epoch`.
  absl::StatusOr<Replica*> FromPrimaryLocked(const std::string& caller, int64_t epoch,
                                             int64_t shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the primary learns from a backup's answer to a message sent at `sent`.
  void Answered(int64_t shard, const std::string& backup, absl::Time sent,
                const absl::Status& answer);
  void SendHeartbeats(int64_t shard, bool idle = false);
  // What SendToBackup sends: a heartbeat; the message of changes the
  // backup's outbox has in flight (see Note [Replication batches]); or changes
  // sent beside it — sent again, or numbered before what it carries.
  enum class Sent { kHeartbeat, kBatch, kBeside };
  // Sends `message` as `service` to `backup` of `shard`; its answer
  // confirms the changes the backup made (`log`) and goes to Answered; a
  // batch's answer sends the next (SendWaiting).
  void SendToBackup(int64_t shard, const std::string& backup, const char* service,
                    std::vector<c10::IValue> message, const std::shared_ptr<OpLog>& log, Sent kind);
  // Sends the changes waiting in `backup`'s outbox of `shard`, if any.
  void SendWaiting(int64_t shard, const std::string& backup, const std::shared_ptr<OpLog>& log);
  // Routes `message` as `r`'s changes by today's map.
  void StampLocked(const Replica& r, ReplicateRequest* message) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `message`, changes `backup` did not confirm, again.
  void SendAgain(int64_t shard, const std::string& backup, const char* service,
                 std::vector<c10::IValue> message, const std::shared_ptr<OpLog>& log);
  void Tick();
  void ScheduleTick();
  void ServerFailed(const std::string& server);
  // Drops the replicas the map no longer names this server in, then asks
  // to join a shard short of backups whose first choice this server is.
  void Rejoin();
  std::vector<std::shared_ptr<OpLog>> DropReplicasLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lost shard this server should restore now, or -1.
  int64_t LostShardToRestoreLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shard this server should join now, or -1.
  int64_t ShardToJoinLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The primary's last step of AddBackup: `joiner` holds every table.
  void RecordBackup(int64_t shard, const std::string& joiner, int64_t last);
  // A joiner gives its join of `shard` up (its replica is dropped next tick).
  void GiveUpJoin(int64_t shard, const std::string& why);
  void TrainerGone(int rank, int64_t incarnation);
  std::string NameOf(int rank) const;

  mutable Mutex mu_;
  ShardMap map_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Replica> replicas_ ABSL_GUARDED_BY(mu_);
  // No join is asked before then (one failed: it waits a failure timeout).
  absl::Time join_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // RecordProgress's: each shard's clock last recorded, and when it may next.
  std::map<int64_t, int64_t> recorded_ ABSL_GUARDED_BY(mu_);
  absl::Time record_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace tessera::ps
