// PsClientCore: what a PsClient (ps/ps_client.h) is a handle of — its
// shard router, its tables' clocks and sequences, and the calls to the
// shards. Held by shared_ptr: a continuation of a call (PushPull's pull,
// Clock's messages, a checkpoint's rounds) holds the core, so the futures a
// client returned may outlive the client (see Note [Client handles],
// ps/ps_client.h). The API and its contract are PsClient's.
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
#include "ps/table_keys.h"
#include "rpc/call_options.h"
#include "rpc/runtime.h"

namespace tessera::ps {

class PsClientCore : public std::enable_shared_from_this<PsClientCore> {
 public:
  // Reads the shard map (waiting up to options.start_timeout for the
  // servers), checks the tables against it and says hello to every shard.
  static absl::StatusOr<std::shared_ptr<PsClientCore>> Connect(rpc::Runtime& runtime,
                                                               PsOptions options,
                                                               rpc::CallOptions call);

  // PsClient's calls, each as documented there.
  Future<at::Tensor> Pull(const std::string& table, const at::Tensor& keys);
  Future<std::monostate> Push(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads);
  Future<std::vector<at::Tensor>> Pull(const std::vector<TableKeys>& parts);
  Future<std::monostate> Push(const std::vector<TableKeys>& parts);
  Future<at::Tensor> PushPull(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads);
  Future<std::monostate> Clock();
  Future<int64_t> Checkpoint(absl::Duration within);
  int64_t clock(const std::string& table) const;
  ShardMap shard_map() const { return router_->map(); }
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

  PsClientCore(rpc::Runtime& runtime, const PsOptions& options, rpc::CallOptions call,
               ShardMap map);
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
