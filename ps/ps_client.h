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
// ordered after a push still in flight (PushPull is). The client must
// outlive the futures its PushPull, Clock and Checkpoint calls return.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/future.h"
#include "common/mutex.h"
#include "ps/ps_options.h"
#include "ps/shard_map.h"
#include "ps/shard_router.h"
#include "rpc/call_options.h"
#include "rpc/runtime.h"

namespace tessera::ps {

// One table's part of a call of several tables: its keys, and for a push
// their gradients.
struct TableKeys {
  std::string table;
  at::Tensor keys;
  at::Tensor grads;  // Push only
};

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
  ShardMap shard_map() const { return router_->map(); }
  // Each shard's {rows, pushes applied, duplicates, clock} (ShardStats),
  // then the messages of changes its primary sent its backups.
  Future<std::vector<std::vector<int64_t>>> Stats(const std::string& table);

 private:
  struct Table {
    TableOptions options;
    int64_t clock = 0;
    std::vector<int64_t> sequences;  // the next push's sequence, by shard
  };
  // A call's keys, made distinct and split by shard.
  struct Split {
    at::Tensor unique, inverse;               // unique[inverse] == keys
    std::vector<int64_t> shards;              // the shards with keys
    std::vector<at::Tensor> keys, positions;  // by shard: its keys, their places in unique
  };

  PsClient(rpc::Runtime& runtime, const PsOptions& options, rpc::CallOptions call, ShardMap map);
  absl::Status Hello();
  absl::StatusOr<Split> SplitKeys(const Table& table, const at::Tensor& keys) const;
  // A table's rows for the keys asked (split.inverse's), from its shards'
  // answers (by split).
  static absl::StatusOr<at::Tensor> Assemble(const std::string& table, const Split& split,
                                             std::vector<at::Tensor> answers, int64_t dim);
  // The message of type M to `shard`'s server, its answer as R.
  template <typename R, typename M>
  Future<R> Send(int64_t shard, const M& message) const;
  absl::StatusOr<Table*> Find(const std::string& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint's steps: every shard agrees to cut `tables` at one clock
  // (from `clock`, asked again at the latest any answered); then each
  // shard wrote it (asked again while the cut waits for trainers, until
  // `deadline`).
  Future<int64_t> AgreeOnCut(std::vector<std::string> tables, int64_t clock, int round) const;
  Future<int64_t> AwaitSaved(std::vector<std::string> tables, int64_t clock,
                             absl::Time deadline) const;

  rpc::Runtime& runtime_;
  const rpc::CallOptions call_;
  const int64_t shards_;
  const std::shared_ptr<ShardRouter> router_;
  mutable Mutex mu_;
  std::map<std::string, Table> tables_ ABSL_GUARDED_BY(mu_);
  // Pushes since the last Clock(): it ends the clock once they are taken.
  std::vector<Future<std::monostate>> pushes_in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::ps
