#include "rpc/rendezvous.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera::rpc {
namespace {
std::string WorkerKey(const std::string& prefix, int rank) {
  return absl::StrCat(prefix, "/workers/", rank);
}
}  // namespace

absl::StatusOr<std::vector<WorkerInfo>> Rendezvous(store::StoreClient& store,
                                                   const std::string& prefix,
                                                   const WorkerInfo& self,
                                                   int world_size,
                                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto status = store.Set(WorkerKey(prefix, self.rank),
                          absl::StrCat(self.name, "\n", self.address, "\n", self.role));
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
    std::vector<std::string> parts = absl::StrSplit(*value, absl::MaxSplits('\n', 2));
    if (parts.size() != 3) {
      return absl::DataLossError("malformed rendezvous entry for rank " +
                                 std::to_string(rank));
    }
    if (!names.insert(parts[0]).second) {
      return absl::InvalidArgumentError("two workers are named '" + parts[0] +
                                        "'; worker names must be unique");
    }
    workers[rank] = WorkerInfo{parts[0], rank, parts[1], parts[2]};
  }
  return workers;
}

}  // namespace tessera::rpc
