// Rendezvous: workers publish who they are and where they listen, then wait
// for everyone else, through the store.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/rpc_agent.h"
#include "store/store_client.h"

namespace tessera::rpc {

// Publishes `self` and returns all `world_size` workers, indexed by rank.
// Fails with DeadlineExceeded naming the ranks that did not show up within
// `timeout`, InvalidArgument on duplicate names, or FailedPrecondition when
// some workers advertise loopback and others do not (they are on other
// hosts, and cannot dial loopback).
absl::StatusOr<std::vector<WorkerInfo>> Rendezvous(store::StoreClient& store,
                                                   const std::string& prefix,
                                                   const WorkerInfo& self,
                                                   int world_size,
                                                   absl::Duration timeout);

// For a worker entering a running job (see Note [Elastic membership]): a new
// incarnation of a rank that died, or a rank beyond the initial ones
// (handed out by tessera-run --join). Publishes `self`, then returns the
// table as it stands — the initial ranks (waiting for them up to `timeout`)
// and those that joined since; a joined rank whose worker has not published
// yet has an empty name.
absl::StatusOr<std::vector<WorkerInfo>> RejoinRendezvous(store::StoreClient& store,
                                                         const std::string& prefix,
                                                         const WorkerInfo& self,
                                                         absl::Duration timeout);

// Rank `rank`'s entry as its worker last published it (DeadlineExceeded if
// none is there).
absl::StatusOr<WorkerInfo> ReadWorker(store::StoreClient& store, const std::string& prefix,
                                      int rank);

// The ranks that are, or were, in the job: the initial world size plus the
// ranks handed out since. `world_size` is the caller's, for when the job
// never recorded one.
absl::StatusOr<int> RanksEverInJob(store::StoreClient& store, const std::string& prefix,
                                   int world_size);

// Those of `ranks` recorded as having left for good (LeftKey).
absl::StatusOr<std::vector<int>> LeftRanks(store::StoreClient& store, const std::string& prefix,
                                           int ranks);

}  // namespace tessera::rpc
