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
// name twice does). Start publishes the shard map (Note [Shard map], ps/shard_map.h) and
// registers the parameter server's services (ps/ps_messages.h) on the
// runtime. The services live as long as the runtime; the server's shards as
// long as either the PsServer or the runtime's registry holds them.
// Trainers that fail or leave (the runtime's membership) stop holding the
// clocks back (Note [Parameter-server consistency], ps/shard.h).
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps/ps_options.h"
#include "ps/shard.h"
#include "rpc/runtime.h"

namespace tessera::ps {

class PsServer {
 public:
  // InvalidArgument when this worker is not one of options.servers;
  // FailedPrecondition when the store holds another shard map.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(rpc::Runtime& runtime,
                                                         const PsOptions& options);

  // This worker's shard of `table`, or nullptr (for tests and checkpoints).
  std::shared_ptr<Shard> shard(const std::string& table) const;
  int64_t epoch() const;

  struct State;

 private:
  explicit PsServer(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace tessera::ps
