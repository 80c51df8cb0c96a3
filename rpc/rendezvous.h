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

}  // namespace tessera::rpc
