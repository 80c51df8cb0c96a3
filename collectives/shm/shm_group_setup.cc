#include "collectives/shm/shm_group_setup.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/shm/hierarchical_process_group.h"
#include "collectives/shm/host_identity.h"
#include "collectives/shm/host_layout.h"
#include "collectives/shm/shm_communicator.h"
#include "collectives/shm/shm_segment.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::collectives {
namespace {

std::vector<std::string> Keys(const std::string& prefix, int count) {
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i) keys.push_back(absl::StrCat(prefix, i));
  return keys;
}

// Reads every key (all must appear before `deadline`), in key order.
absl::StatusOr<std::vector<std::string>> ReadAll(store::StoreClient* store,
                                                 const std::vector<std::string>& keys,
                                                 absl::Time deadline, const char* what) {
  TESSERA_ASSIGN_OR_RETURN(auto values, store->GetMany(keys, deadline - absl::Now()));
  std::vector<std::string> ordered;
  for (const auto& key : keys) {
    auto it = values.find(key);
    if (it == values.end()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "shared-memory set-up: no ", what, " at ", key, " in the store at ", store->target(),
          " in time (a rank is missing or late, or made its group with shared-memory "
          "collectives off: TESSERA_SHM_COLLECTIVES and GlooOptions::shm must agree "
          "on every rank)"));
    }
    ordered.push_back(it->second);
  }
  return ordered;
}

// This host's communicator: local rank 0 makes the segment and publishes
// its name (or why it could not); the others open it; all attach.
absl::StatusOr<std::unique_ptr<ShmCommunicator>> JoinHost(store::StoreClient* store,
                                                          const std::string& prefix,
                                                          const HostLayout& layout, int rank,
                                                          size_t slot_bytes, absl::Duration timeout,
                                                          absl::Time deadline) {
  const int host = layout.host_of_rank[rank];
  const std::vector<int>& ranks = layout.ranks_of_host[host];
  const int local_rank = layout.local_rank_of[rank];
  const size_t bytes = ShmCommunicator::SegmentBytes(static_cast<int>(ranks.size()), slot_bytes);
  const std::string key = absl::StrCat(prefix, "/segment/", host);
  std::unique_ptr<ShmCommunicator> communicator;
  if (local_rank == 0) {
    auto made = ShmSegment::Create(absl::StrCat("h", host), bytes);
    if (made.ok()) {
      // Ready before anyone can learn its name.
      communicator = std::make_unique<ShmCommunicator>(*std::move(made), local_rank, ranks,
                                                       slot_bytes, timeout);
      communicator->InitializeSegment();
    }
    TESSERA_RETURN_IF_ERROR(
        store->Set(key, made.ok() ? communicator->segment_name() : "!" + made.status().ToString()));
    TESSERA_RETURN_IF_ERROR(made.status());
  } else {
    TESSERA_ASSIGN_OR_RETURN(auto name, ReadAll(store, {key}, deadline, "segment name"));
    if (name[0].rfind("!", 0) == 0) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", ranks[0], " could not make this host's segment: ", name[0].substr(1)));
    }
    TESSERA_ASSIGN_OR_RETURN(auto segment, ShmSegment::Open(name[0], bytes));
    communicator = std::make_unique<ShmCommunicator>(std::move(segment), local_rank, ranks,
                                                     slot_bytes, timeout);
  }
  TESSERA_RETURN_IF_ERROR(communicator->Attach(deadline));
  return communicator;
}

}  // namespace

absl::StatusOr<bool> ShmCollectivesEnabled(bool configured) {
  const char* value = std::getenv("TESSERA_SHM_COLLECTIVES");
  if (value == nullptr || *value == '\0') return configured;
  const std::string text = value;
  if (text == "0") return false;
  if (text == "1") return true;
  return absl::InvalidArgumentError(
      absl::StrCat("TESSERA_SHM_COLLECTIVES=", text, ": expected 0 (off) or 1 (on)"));
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> WithSharedMemory(
    std::unique_ptr<ProcessGroup> flat, store::StoreClient* store, const std::string& store_prefix,
    const ShmCollectivesOptions& options, absl::Duration timeout, absl::Duration connect_timeout,
    const ConnectGroup& connect_leaders) {
  TESSERA_ASSIGN_OR_RETURN(const bool enabled, ShmCollectivesEnabled(options.enabled));
  const int rank = flat->rank();
  const int size = flat->size();
  if (!enabled || size == 1) return flat;
  const absl::Time deadline = absl::Now() + connect_timeout;
  const std::string prefix = store_prefix + "/shm";
  TESSERA_RETURN_IF_ERROR(
      store->Set(absl::StrCat(prefix, "/host/", rank), SharedMemoryHostIdentity()));
  TESSERA_ASSIGN_OR_RETURN(
      auto identities, ReadAll(store, Keys(prefix + "/host/", size), deadline, "host identity"));
  const HostLayout layout = HostLayout::FromIdentities(identities);
  if (!layout.AnyShared()) return flat;

  const int local_size = layout.local_size(rank);
  const size_t slot_bytes =
      options.slot_bytes != 0 ? options.slot_bytes : ShmCommunicator::kDefaultSlotBytes;
  std::unique_ptr<ShmCommunicator> local;
  absl::Status joined;
  if (local_size > 1) {
    auto communicator = JoinHost(store, prefix, layout, rank, slot_bytes, timeout, deadline);
    joined = communicator.status();
    if (communicator.ok()) local = *std::move(communicator);
  }
  // Every rank learns whether every host could: all use the hierarchy, or
  // none does (a mix would deadlock).
  TESSERA_RETURN_IF_ERROR(
      store->Set(absl::StrCat(prefix, "/joined/", rank), joined.ok() ? "" : joined.ToString()));
  TESSERA_ASSIGN_OR_RETURN(auto outcomes,
                           ReadAll(store, Keys(prefix + "/joined/", size), deadline, "outcome"));
  for (int r = 0; r < size; ++r) {
    if (outcomes[r].empty()) continue;
    if (rank == 0 || r == rank) {
      TESSERA_LOG(WARNING) << "collectives stay on the flat backend: rank " << r
                           << " could not join its host's shared memory: " << outcomes[r];
    }
    return flat;
  }

  std::unique_ptr<ProcessGroup> leaders;
  const int host = layout.host_of_rank[rank];
  if (layout.hosts() > 1 && layout.local_rank_of[rank] == 0) {
    TESSERA_ASSIGN_OR_RETURN(leaders, connect_leaders(host, layout.hosts(), prefix + "/leaders"));
  }
  if (rank == 0) {
    TESSERA_LOG(INFO) << "collectives through shared memory: " << size << " ranks on "
                      << layout.hosts() << " host(s), " << slot_bytes << "-byte slots";
  }
  return std::unique_ptr<ProcessGroup>(new HierarchicalProcessGroup(
      std::move(flat), std::move(local), std::move(leaders), layout, timeout));
}

}  // namespace tessera::collectives
