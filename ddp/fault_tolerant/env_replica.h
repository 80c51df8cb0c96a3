// A fault-tolerant DDP replica as tessera-run starts it: who it is and the
// store it meets its peers through, read from the environment, as
// Worker::Start(WorkerOptions::FromEnv()) starts an RPC worker and
// CreateGlooProcessGroupFromEnv a plain DDP rank.
//
//   auto replica = ValueOrThrow(ddp::ConnectReplicaFromEnv());
//   options.replica_id = replica.id;
//   options.quorum.initial_replicas = replica.world_size;
//   ddp::FaultTolerantDdp ft(replica.store.get(), module, optimizer, options);
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "store/store_client.h"

namespace tessera::ddp {

struct EnvReplica {
  // The job's store, authenticated with the job secret (keep it alive
  // while the FaultTolerantDdp made with it is).
  std::unique_ptr<store::StoreClient> store;
  int rank = 0;        // RANK
  int world_size = 1;  // the replicas the job started with (WORLD_SIZE)
  std::string id;      // "replica<rank>": the same for every incarnation
};

// Reads tessera-run's environment (store/rendezvous_env.h), connects to its
// store and declares this rank's role "replica", so that `tessera-run
// --elastic_roles replica` restarts it alone when it dies.
// FailedPrecondition when no store outlives the replicas (not started by a
// launcher that hosts one, nor given an etcd store); other errors name the
// variable or the store that failed. The store's calls wait up to the
// job's rendezvous budget (TESSERA_RDZV_TIMEOUT_S) by default, else 60 s.
absl::StatusOr<EnvReplica> ConnectReplicaFromEnv();

}  // namespace tessera::ddp
