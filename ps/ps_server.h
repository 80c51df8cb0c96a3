// PsServer: this worker's part of a sharded parameter server — the shards of
// every table the shard map puts here, served to the job's trainers.
//
//   ps::PsOptions options;
//   options.servers = {"ps0", "ps1"};
//   options.tables = {ps::TableOptions::Sparse("emb", 64), ...};
//   auto server = ps::PsServer::Start(worker->rpc(), options);   // on ps0, ps1
//   ... serve until the job ends: worker->Shutdown() ...
//
// One PsServer per runtime (its services have fixed names: a second Start
// on the same runtime throws StatusError, AlreadyExists, as registering any
// name twice does). Start publishes the shard map (see Note [Shard map], ps/shard_map.h) and
// registers the parameter server's services (ps/ps_messages.h) on the
// runtime. The services live as long as the runtime; the server's shards as
// long as either the PsServer or the runtime's registry holds them.
// Trainers that fail or leave (the runtime's membership) stop holding the
// clocks back (see Note [Parameter-server consistency], ps/shard.h).
//
// Note [Parameter-server replication]: every shard has a primary and
// PsOptions::backups backups (ShardMap::replicas, ps/shard_map.h). Only the
// primary serves trainers. Each change it makes to the shard — a push
// taken, a trainer's clock, hello or end — is numbered (ps/op_log.h) and
// sent to every backup, which makes the same changes in the same order
// (Shard::Replay): replicas hold the same bits. A request is acknowledged
// only once every backup in the map applied its changes (a push sent
// again, a duplicate, once every backup has everything made before it).
// Hence no acknowledged push is lost while one replica of its shard lives.
//
// Failover: a backup takes its primary out of the map — by compare-and-set
// on the map in the store (ChangeShardMap), so of two servers changing the
// map one wins and the other sees the result — when the primary's
// connection broke (after the primary's lease, below) or when it said
// nothing for failure_timeout while trainers used it; a primary takes out a
// backup that answered nothing for as long. The first backup becomes the
// primary. Trainers' calls fail over with it (ps/shard_router.h) and carry
// the same sequences, so what the old primary had applied and replicated
// is acknowledged as a duplicate and nothing is applied twice; what it had
// applied and not replicated was never acknowledged, and the new primary
// applies it once. A backup's changes that were still waiting for an
// earlier one the old primary never sent are dropped: no trainer was told
// they were taken.
//
// Fencing: a primary that was cut off or paused, and replaced, must not
// act as one. Its changes cannot be acknowledged: its backups refuse its
// messages (the map no longer names it), and it learns the map from their
// refusal, from the store (read every heartbeat) or from trainers' newer
// epochs; from then on it refuses every request as the shard's primary,
// naming itself, the epoch and the new primary (Aborted: route again).
// Reads are fenced by a lease: a primary answers pulls only while every
// backup answered a message it sent within failure_timeout / 5, and a
// backup takes over only after its primary has been silent for longer
// (failure_timeout), or after that lease from the last message it had when
// the primary's connection broke — so by the time a new primary serves,
// the old one's lease has ended.
//
// A primary heartbeats its backups only while trainers use it, then tells
// them it goes idle and falls silent (they then do not take its silence for
// failure): a job whose trainers finished goes quiet, as the runtime's
// graceful shutdown needs. With more than one backup, the backup promoted
// checks with each other backup that they made the same changes (`base`);
// one that did not is taken out. A shard whose every replica was lost
// answers Unavailable, unless the job takes checkpoints (below).
//
// Re-replication (ps/server_join.cc): a shard with fewer than 1 + backups
// replicas is joined by a live server that holds none of it — the first
// choice, by host and order, of every server's same reckoning — while its
// primary serves on. The primary notes its last change, sends the joiner
// every change from then on, then each table's snapshot (ShardSnapshot,
// exactly its changes up to its own cut, read under the table's lock;
// copy-on-write, so pushes go on while it is taken);
// the joiner holds the changes back until it holds every table, then makes
// those no snapshot holds, in order. Only then does the primary add it to
// the map (compare-and-set), and from then on wait for it. A restarted
// server holds nothing: it takes its old name out of the map (after the
// lease its last incarnation may still hold) and joins anew; a server the
// map dropped from a shard (a replaced primary that woke, a backup that
// diverged or was silent) drops its replica and joins anew. A server
// added to a running job (Join) first adds its name to the map's servers,
// the list every server reckons joiners from; then it joins the same way.
//
// Checkpoints (see Note [Sharded checkpoints], ps/shard_cut.cc): a trainer
// asks every shard to cut at one clock; each primary copies, writes and
// releases its cut (ps/server_checkpoint.cc). A server started with a job
// resumes from the latest complete checkpoint (PsOptions::checkpoint_dir);
// a shard that lost every replica is restored from it by the first live
// server, which becomes its primary.
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps/ps_options.h"
#include "ps/shard.h"
#include "ps/shard_map.h"
#include "rpc/runtime.h"

namespace tessera::ps {

class PsServer {
 public:
  // InvalidArgument when this worker is not one of options.servers;
  // FailedPrecondition when the store holds another shard map.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(rpc::Runtime& runtime,
                                                         const PsOptions& options);
  // A server added to a running job (this worker is not one of
  // options.servers, the servers it started with): it adds itself to the
  // shard map's servers (ShardMap::servers; epoch + 1) and then, like any
  // server, joins the shards short of backups — say, to replace a lost
  // machine's. It serves trainers once it is a shard's primary (its
  // primary lost). Fails naming the job when it has no shard map within
  // options.start_timeout; FailedPrecondition when its tables differ.
  static absl::StatusOr<std::unique_ptr<PsServer>> Join(rpc::Runtime& runtime,
                                                        const PsOptions& options);

  // The shard of `table` this server is primary of, or nullptr (for tests
  // and checkpoints).
  std::shared_ptr<Shard> shard(const std::string& table) const;
  int64_t epoch() const;
  ShardMap shard_map() const;

  struct State;

 private:
  explicit PsServer(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Registers the services over `state` and starts its watch.
  static std::unique_ptr<PsServer> Serve(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tessera::ps
