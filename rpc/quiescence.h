// Note [Graceful shutdown agreement]
//
// Workers must not close while any request or response is still travelling:
// a handler may be about to call onward, and a closed peer would fail it.
// Each worker counts requests sent/received and responses sent/received
// (AgentCounters). In rounds, every worker publishes its counters to the
// store and reads everyone's. The job is quiescent when, for two consecutive
// rounds, all counters are unchanged and every worker is locally idle (each
// request it sent was answered, each request it received was answered).
// A call in flight keeps its caller non-idle until the answer arrives, and
// anything that happened between two snapshots changes some counter, so
// two identical idle rounds mean nothing is left anywhere (the four-counter
// termination test). Balancing per worker rather than job-wide keeps
// requests from outside the job (which no agent counted as sent) from
// wedging it. All workers read the same snapshots, so all decide in the
// same round.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rpc/rpc_agent.h"
#include "store/store_client.h"

namespace tessera::rpc {

// Returns the first error of `probe`(ranks that have not published this
// round), which the lowest rank that has published runs about once a
// second while some are missing; the others hear its verdict through the
// store (see Note [Shutdown liveness], rpc/shutdown_prober.h).
using MissingProbe = std::function<absl::Status(const std::vector<int>& missing)>;

// Returns OK once the job is quiescent, or DeadlineExceeded naming the ranks
// that stopped taking part (or the imbalance) at `deadline`, or the error
// `probe` found. Rounds are published under "<prefix>/<round>/<rank>"; each
// agreement needs its own prefix.
// `participants` gives the ranks taking part, asked again each round (an
// elastic job's members may leave while others wait: see Note [Elastic
// membership], rpc/runtime.h).
absl::Status AgreeQuiescent(store::StoreClient& store, const std::string& prefix, int rank,
                            const std::function<std::vector<int>()>& participants,
                            const RpcAgent& agent, absl::Time deadline,
                            const MissingProbe& probe = nullptr);

}  // namespace tessera::rpc
