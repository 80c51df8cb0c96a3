#include "ddp/fault_tolerant/env_replica.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "common/status.h"
#include "store/elastic_keys.h"
#include "store/elastic_role.h"
#include "store/rendezvous_env.h"
#include "store/store_url.h"

namespace tessera::ddp {

absl::StatusOr<EnvReplica> ConnectReplicaFromEnv() {
  TESSERA_ASSIGN_OR_RETURN(const store::RendezvousEnv env, store::ReadRendezvousEnv());
  // A replica that dies takes no store with it: rank 0's own would.
  if (!env.store_hosted && env.store_url.empty()) {
    return absl::FailedPreconditionError(
        "fault-tolerant DDP needs a store that outlives the replicas: run it under tessera-run "
        "(TESSERA_STORE_HOSTED) or give it an etcd store (TESSERA_STORE)");
  }
  TESSERA_ASSIGN_OR_RETURN(auth::JobSecret secret, auth::JobSecret::FromEnv());
  EnvReplica replica;
  TESSERA_ASSIGN_OR_RETURN(
      replica.store,
      store::ConnectStore(env.StoreAddress(), env.rendezvous_timeout.value_or(absl::Seconds(60)),
                          std::move(secret)));
  TESSERA_RETURN_IF_ERROR(store::elastic::DeclareRole(
      *replica.store, store::elastic::kDefaultPrefix, env.rank, "replica"));
  replica.rank = env.rank;
  replica.world_size = env.world_size;
  replica.id = absl::StrCat("replica", env.rank);
  return replica;
}

}  // namespace tessera::ddp
