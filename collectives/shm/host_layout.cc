#include "collectives/shm/host_layout.h"

#include <map>

namespace tessera::collectives {

HostLayout HostLayout::FromIdentities(const std::vector<std::string>& identity_of_rank) {
  HostLayout layout;
  std::map<std::string, int> host_of_identity;
  for (int rank = 0; rank < static_cast<int>(identity_of_rank.size()); ++rank) {
    auto [it, added] = host_of_identity.emplace(identity_of_rank[rank],
                                                static_cast<int>(layout.ranks_of_host.size()));
    if (added) layout.ranks_of_host.emplace_back();
    layout.host_of_rank.push_back(it->second);
    layout.local_rank_of.push_back(static_cast<int>(layout.ranks_of_host[it->second].size()));
    layout.ranks_of_host[it->second].push_back(rank);
  }
  return layout;
}

bool HostLayout::Uniform() const {
  for (const auto& ranks : ranks_of_host) {
    if (ranks.size() != ranks_of_host.front().size()) return false;
  }
  return true;
}

bool HostLayout::AnyShared() const {
  for (const auto& ranks : ranks_of_host) {
    if (ranks.size() > 1) return true;
  }
  return false;
}

}  // namespace tessera::collectives
