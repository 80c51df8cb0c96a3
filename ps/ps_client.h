// PsClient: a trainer's side of a sharded parameter server.
//
//   auto ps = ps::PsClient::Connect(worker->rpc(), options);   // the servers' PsOptions
//   at::Tensor rows = ps->Pull("emb", ids).Get(timeout);       // [ids, dim]
//   ... forward, backward on this trainer ...
//   ps->Push("emb", ids, grad_rows).Get(timeout);
//   ps->Clock().Get(timeout);                                 // this step is done
//
// A call's keys (int64, 1-D, any order, repeats allowed) are made distinct
// and split by shard: one message per shard, its rows as one tensor per
// table — a call of several tables (a step's pulls or pushes, TableKeys)
// is still one message per shard; a
// pull's rows come back in the order of the keys asked, repeats included,
// and a push's gradients of a repeated key are summed. Pull and Push return
// futures and never throw; a server that fails the call (a dead server, a
// refused request) fails the future with its error, naming the server and
// the table. A call whose shard fails over is sent to the new primary
// (ps/shard_router.h). Consistency: see Note [Parameter-server consistency],
// ps/shard.h.
// Clock() ends this trainer's step for every table.
//
// Thread-safety: thread-safe. Pushes and pulls may overlap; a pull is not
// ordered after a push still in flight (PushPull is).
//
// Note [Client handles]: a PsClient is a handle of its core
// (ps/ps_client_core.h), and every continuation of its calls holds the
// core, so the futures it returned may outlive it — a trainer that drops
// its client (an error unwinding its step, its end) with a checkpoint or a
// clock still in flight loses nothing and reads nothing freed: the calls
// run to their deadlines and their futures complete. (Before, they held
// the client itself: a trainer that failed mid-step with a checkpoint in
// flight could crash on the freed client; tests/ps/ps_checkpoint_test.cc,
// AClientDroppedWithACheckpointInFlightLeavesItToFinish, under ASan.)
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/future.h"
#include "ps/ps_options.h"
#include "ps/shard_map.h"
#include "ps/table_keys.h"
#include "rpc/call_options.h"

namespace tessera::rpc {
class Runtime;
}  // namespace tessera::rpc

namespace tessera::ps {

class PsClientCore;

class PsClient {
 public:
  // Reads the shard map (waiting up to options.start_timeout for the
  // servers), checks the tables against it and says hello to every shard.
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(rpc::Runtime& runtime, PsOptions options,
                                                           rpc::CallOptions call = {});

  Future<at::Tensor> Pull(const std::string& table, const at::Tensor& keys);
  Future<std::monostate> Push(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads);
  // Several tables at once: each part's rows, in order.
  Future<std::vector<at::Tensor>> Pull(const std::vector<TableKeys>& parts);
  Future<std::monostate> Push(const std::vector<TableKeys>& parts);
  // The push, then a pull of the same keys once every shard took it.
  Future<at::Tensor> PushPull(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads);
  // Ends this trainer's current clock for every table, once every push made
  // since the last Clock() was taken (or failed: then it fails with that
  // push's error); completes when every shard knows.
  Future<std::monostate> Clock();
  // A checkpoint of every table at one clock (see Note [Sharded checkpoints],
  // ps/shard_cut.cc), written by the servers under PsOptions::
  // checkpoint_dir: completes with its clock c once every shard wrote it.
  // That is once every live trainer ended clock c − 1, this one included:
  // go on training, and wait for it later (at the latest, `within` after
  // the call; each shard is asked until then). FailedPrecondition when the
  // servers have no checkpoint_dir.
  Future<int64_t> Checkpoint(absl::Duration within = absl::Minutes(10));
  int64_t clock(const std::string& table) const;
  // The shard map as this trainer last read it.
  ShardMap shard_map() const;
  // Each shard's {rows, pushes applied, duplicates, clock} (ShardStats),
  // then the messages of changes its primary sent its backups.
  Future<std::vector<std::vector<int64_t>>> Stats(const std::string& table);

 private:
  explicit PsClient(std::shared_ptr<PsClientCore> core) : core_(std::move(core)) {}

  std::shared_ptr<PsClientCore> core_;
};

}  // namespace tessera::ps
