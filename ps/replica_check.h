// Whether the replicas of a parameter server's shards agree: what a test or
// a tool asks once training has stopped, to prove replication kept every
// copy the same (see Note [Parameter-server replication], ps/ps_server.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rpc/runtime.h"

namespace tessera::ps {

// Asks every replica of every shard of `tables` in job `job`'s shard map
// (as recorded in the store now) for its digest (DigestRequest): how many
// changes it made, a hash of its rows and state, and its rows. OK when each
// shard's replicas answered the same; else DataLoss naming the table, the
// shard and every replica's answer, or the error of a replica that did not
// answer within `timeout`. Replicas differ while a change travels between
// them, so ask only when no push is in flight (after the trainers' last
// clock).
absl::Status CompareReplicas(rpc::Runtime& runtime, const std::string& job,
                             const std::vector<std::string>& tables, absl::Duration timeout);

}  // namespace tessera::ps
