#include "rpc/rendezvous.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/host_address.h"
#include "common/host_load.h"
#include "common/status.h"
#include "store/elastic_keys.h"

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

// See Note [Choosing the host address]: a worker advertising loopback in a job
// whose other workers are elsewhere cannot be dialled by them. Every worker
// sees the same table, so each fails at once naming the culprits, instead
// of the first call to them failing minutes later.
absl::Status CheckReachable(const std::vector<WorkerInfo>& workers) {
  std::vector<std::string> loopback, remote;
  for (const auto& worker : workers) {
    if (worker.name.empty()) continue;  // a joined rank not published yet
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

namespace {

absl::Status Publish(store::StoreClient& store, const std::string& prefix, const WorkerInfo& self) {
  return store.Set(WorkerKey(prefix, self.rank),
                   absl::StrCat(self.name, "\n", self.address, "\n", self.role, "\n", self.locality,
                                "\n", self.incarnation));
}

absl::StatusOr<WorkerInfo> ParseWorker(int rank, const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('\n', 4));
  // Older forms, which tests still write: no locality (nothing same-host
  // to use), no incarnation (the first).
  if (parts.size() == 3) parts.push_back("");
  if (parts.size() == 4) parts.push_back("0");
  WorkerInfo worker;
  worker.rank = rank;
  if (parts.size() != 5 || !absl::SimpleAtoi(parts[4], &worker.incarnation)) {
    return absl::DataLossError("malformed rendezvous entry for rank " + std::to_string(rank));
  }
  worker.name = parts[0];
  worker.address = parts[1];
  worker.role = parts[2];
  worker.locality = parts[3];
  return worker;
}

std::vector<std::string> WorkerKeys(const std::string& prefix, int count) {
  std::vector<std::string> keys;
  for (int rank = 0; rank < count; ++rank) keys.push_back(WorkerKey(prefix, rank));
  return keys;
}

// Reads the entries of ranks 0..count-1 in one store call (a Get per rank
// made N workers' rendezvous cost the store N² calls): unpublished ones stay
// nameless placeholders. Names must be unique.
absl::StatusOr<std::vector<WorkerInfo>> ReadWorkers(store::StoreClient& store,
                                                    const std::string& prefix, int count) {
  const std::vector<std::string> keys = WorkerKeys(prefix, count);
  TESSERA_ASSIGN_OR_RETURN(auto published, store.GetMany(keys, absl::ZeroDuration()));
  std::vector<WorkerInfo> workers(count);
  std::set<std::string> names;
  for (int rank = 0; rank < count; ++rank) {
    workers[rank].rank = rank;
    auto value = published.find(keys[rank]);
    if (value == published.end()) continue;  // not published yet
    TESSERA_ASSIGN_OR_RETURN(auto worker, ParseWorker(rank, value->second));
    if (!names.insert(worker.name).second) {
      return absl::InvalidArgumentError("two workers are named '" + worker.name +
                                        "'; worker names must be unique");
    }
    workers[rank] = std::move(worker);
  }
  return workers;
}

// Waits for the entries of ranks 0..count-1; an error names those missing.
absl::Status AwaitWorkers(store::StoreClient& store, const std::vector<std::string>& keys,
                          const WorkerInfo& self, int count, absl::Duration timeout) {
  const std::vector<std::string> awaited(keys.begin(), keys.begin() + count);
  TESSERA_ASSIGN_OR_RETURN(auto missing, store.WaitForKeys(awaited, timeout));
  if (missing.empty()) return absl::OkStatus();
  std::vector<std::string> ranks;
  for (const auto& key : missing) ranks.push_back(key.substr(key.rfind('/') + 1));
  const std::string load = DescribeHostLoad();  // See Note [Slow is not failed]
  return absl::DeadlineExceededError(absl::StrCat(
      "rendezvous of '", self.name, "' timed out after ", absl::FormatDuration(timeout),
      ": rank(s) ", absl::StrJoin(ranks, ", "), " of world size ", count, " never joined (store ",
      store.target(), load.empty() ? "" : "; ", load, ")"));
}

}  // namespace

absl::StatusOr<std::vector<WorkerInfo>> Rendezvous(store::StoreClient& store,
                                                   const std::string& prefix,
                                                   const WorkerInfo& self, int world_size,
                                                   absl::Duration timeout) {
  TESSERA_RETURN_IF_ERROR(Publish(store, prefix, self));
  const std::vector<std::string> keys = WorkerKeys(prefix, world_size);
  TESSERA_RETURN_IF_ERROR(AwaitWorkers(store, keys, self, world_size, timeout));
  TESSERA_ASSIGN_OR_RETURN(auto workers, ReadWorkers(store, prefix, static_cast<int>(keys.size())));
  TESSERA_RETURN_IF_ERROR(CheckReachable(workers));
  return workers;
}

absl::StatusOr<WorkerInfo> ReadWorker(store::StoreClient& store, const std::string& prefix,
                                      int rank) {
  TESSERA_ASSIGN_OR_RETURN(auto value, store.Get(WorkerKey(prefix, rank), absl::ZeroDuration()));
  return ParseWorker(rank, value);
}

absl::StatusOr<int> RanksEverInJob(store::StoreClient& store, const std::string& prefix,
                                   int world_size) {
  auto recorded =
      store::elastic::ReadNumber(store, store::elastic::WorldSizeKey(prefix), absl::ZeroDuration());
  if (!recorded.ok() && !absl::IsDeadlineExceeded(recorded.status())) return recorded.status();
  const int initial = recorded.ok() ? *recorded : world_size;
  TESSERA_ASSIGN_OR_RETURN(auto joined, store.Add(store::elastic::JoinedKey(prefix), 0));
  return initial + static_cast<int>(joined);
}

absl::StatusOr<std::vector<int>> LeftRanks(store::StoreClient& store, const std::string& prefix,
                                           int ranks) {
  std::vector<std::string> keys;
  for (int rank = 0; rank < ranks; ++rank) keys.push_back(store::elastic::LeftKey(prefix, rank));
  TESSERA_ASSIGN_OR_RETURN(auto missing, store.WaitForKeys(keys, absl::ZeroDuration()));
  const std::set<std::string> absent(missing.begin(), missing.end());
  std::vector<int> left;
  for (int rank = 0; rank < ranks; ++rank) {
    if (absent.count(keys[rank]) == 0) left.push_back(rank);
  }
  return left;
}

absl::StatusOr<std::vector<WorkerInfo>> RejoinRendezvous(store::StoreClient& store,
                                                         const std::string& prefix,
                                                         const WorkerInfo& self,
                                                         absl::Duration timeout) {
  TESSERA_RETURN_IF_ERROR(Publish(store, prefix, self));
  auto world = store::elastic::ReadNumber(store, store::elastic::WorldSizeKey(prefix), timeout);
  if (!world.ok()) {
    return Annotate(world.status(), "'" + self.name +
                                        "' cannot rejoin: the job recorded no "
                                        "world size (was it started by tessera-run or rpc::Init?)");
  }
  TESSERA_ASSIGN_OR_RETURN(auto ranks, RanksEverInJob(store, prefix, *world));
  const std::vector<std::string> keys = WorkerKeys(prefix, std::max(ranks, self.rank + 1));
  TESSERA_RETURN_IF_ERROR(AwaitWorkers(store, keys, self, *world, timeout));
  TESSERA_ASSIGN_OR_RETURN(auto workers, ReadWorkers(store, prefix, static_cast<int>(keys.size())));
  TESSERA_RETURN_IF_ERROR(CheckReachable(workers));
  return workers;
}

}  // namespace tessera::rpc
