// Note [Elastic keys]: what tessera-run and the workers of an elastic job
// tell each other through the rendezvous store, all under the job's prefix
// (RpcOptions::store_prefix; tessera-run uses the default, kDefaultPrefix).
// A restart of the whole group clears the store, and with it all of these.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "store/store_client.h"

namespace tessera::store::elastic {

inline constexpr char kDefaultPrefix[] = "tessera";

// The number of ranks the job started with (set by tessera-run and rank 0).
inline std::string WorldSizeKey(const std::string& prefix) {
  return prefix + "/elastic/world_size";
}
// A counter: how many ranks were handed out beyond the initial ones
// (tessera-run --join takes the next ones with Add).
inline std::string JoinedKey(const std::string& prefix) { return prefix + "/elastic/joined"; }
// The most ranks the job may have, joined ones included (tessera-run
// --max_ranks); absent: no bound.
inline std::string MaxRanksKey(const std::string& prefix) { return prefix + "/elastic/max_ranks"; }
// A counter per rank: the incarnation a restarted process of it takes.
inline std::string IncarnationKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/elastic/incarnation/", rank);
}
// The role the rank's worker declared (RpcOptions::role), which tessera-run
// reads to decide whether the rank restarts alone (--elastic_roles).
inline std::string RoleKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/elastic/role/", rank);
}
// The roles tessera-run restarts alone (--elastic_roles, comma-separated):
// until it marks such a rank restarting, a worker waiting in a graceful
// shutdown gives a rank of these roles that died a few seconds' grace.
inline std::string ElasticRolesKey(const std::string& prefix) { return prefix + "/elastic/roles"; }
// Set by a multi-node tessera-run to its --node_timeout in seconds: how
// long a silent node may take to be declared lost, its ranks then recorded
// as left (see Note [Lost nodes], launcher/node_coordinator.h). A graceful
// shutdown gives an unanswering rank of an elastic role that long.
inline std::string NodeTimeoutKey(const std::string& prefix) {
  return prefix + "/elastic/node_timeout_s";
}
// Set by tessera-run, to the reason, just before it starts the rank again
// alone: a graceful shutdown waits for the rank instead of calling it dead.
inline std::string RestartingKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/elastic/restarting/", rank);
}
// Set, to the reason, when a rank will not come back: its worker left
// (Worker::Leave) or tessera-run gave up restarting it. Nobody waits for it.
inline std::string LeftKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/elastic/left/", rank);
}

// The number stored under `key` (WorldSizeKey, MaxRanksKey), waiting up to
// `timeout` for it: DeadlineExceeded when absent, DataLoss when malformed.
inline absl::StatusOr<int> ReadNumber(StoreClient& store, const std::string& key,
                                      absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(auto value, store.Get(key, timeout));
  int number = 0;
  if (!absl::SimpleAtoi(value, &number)) {
    return absl::DataLossError(
        absl::StrCat("malformed number under '", key, "' in the store: '", value, "'"));
  }
  return number;
}

}  // namespace tessera::store::elastic
