#include "rpc/rendezvous.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/host_address.h"

namespace tessera::rpc {
namespace {
std::string WorkerKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/workers/", rank);
}

// The host part of a worker's address ("tcp://[fd00::1]:4000" -> "fd00::1").
std::string HostOf(const std::string& address) {
  std::string host;
  int port = 0;
  SplitHostPort(address, &host, &port);
  return host;
}

// Note [Choosing the host address]: a worker advertising loopback in a job
// whose other workers are elsewhere cannot be dialled by them. Every worker
// sees the same table, so each fails at once naming the culprits, instead
// of the first call to them failing minutes later.
absl::Status CheckReachable(const std::vector<WorkerInfo>& workers) {
  std::vector<std::string> loopback, remote;
  for (const auto& worker : workers) {
    (IsLoopbackAddress(HostOf(worker.address)) ? loopback : remote)
        .push_back(absl::StrCat("'", worker.name, "' (rank ", worker.rank, ") at ", worker.address));
  }
  if (loopback.empty() || remote.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "worker(s) ", absl::StrJoin(loopback, ", "),
      " advertise a loopback address, which the workers on other hosts (",
      absl::StrJoin(remote, ", "),
      ") cannot dial: on their hosts, set TESSERA_SOCKET_IFNAME (or TESSERA_ADDRESS) to an "
      "interface the others can reach, or leave both unset and MASTER_ADDR non-loopback"));
}

}  // namespace

absl::StatusOr<std::vector<WorkerInfo>> Rendezvous(store::StoreClient& store,
                                                   const std::string& prefix,
                                                   const WorkerInfo& self,
                                                   int world_size,
                                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto status = store.Set(WorkerKey(prefix, self.rank),
                          absl::StrCat(self.name, "\n", self.address, "\n", self.role, "\n", self.locality));
  if (!status.ok()) return status;

  std::vector<std::string> keys;
  for (int rank = 0; rank < world_size; ++rank) keys.push_back(WorkerKey(prefix, rank));
  auto missing = store.WaitForKeys(keys, deadline - absl::Now());
  if (!missing.ok()) return missing.status();
  if (!missing->empty()) {
    std::vector<std::string> ranks;
    for (const auto& key : *missing) ranks.push_back(key.substr(key.rfind('/') + 1));
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous of '", self.name, "' timed out after ",
        absl::FormatDuration(timeout), ": rank(s) ", absl::StrJoin(ranks, ", "),
        " of world size ", world_size, " never joined (store ", store.target(), ")"));
  }

  std::vector<WorkerInfo> workers(world_size);
  std::set<std::string> names;
  for (int rank = 0; rank < world_size; ++rank) {
    auto value = store.Get(keys[rank], absl::ZeroDuration());
    if (!value.ok()) return value.status();
    std::vector<std::string> parts = absl::StrSplit(*value, absl::MaxSplits('\n', 3));
    if (parts.size() == 3) parts.push_back("");  // no locality: nothing same-host to use
    if (parts.size() != 4) {
      return absl::DataLossError("malformed rendezvous entry for rank " +
                                 std::to_string(rank));
    }
    if (!names.insert(parts[0]).second) {
      return absl::InvalidArgumentError("two workers are named '" + parts[0] +
                                        "'; worker names must be unique");
    }
    workers[rank] = WorkerInfo{parts[0], rank, parts[1], parts[2], parts[3]};
  }
  if (auto reachable = CheckReachable(workers); !reachable.ok()) return reachable;
  return workers;
}

}  // namespace tessera::rpc
