// Which ranks share a host (by SharedMemoryHostIdentity), as every rank
// computes it from the same published identities.
#pragma once

#include <string>
#include <vector>

namespace tessera::collectives {

struct HostLayout {
  // Hosts are numbered by their lowest rank; a host's ranks are in rank
  // order, so local rank 0 (the host's leader) is its lowest rank.
  std::vector<std::vector<int>> ranks_of_host;
  std::vector<int> host_of_rank;
  std::vector<int> local_rank_of;

  static HostLayout FromIdentities(const std::vector<std::string>& identity_of_rank);

  int hosts() const { return static_cast<int>(ranks_of_host.size()); }
  int local_size(int rank) const {
    return static_cast<int>(ranks_of_host[host_of_rank[rank]].size());
  }
  // Every host has the same number of ranks.
  bool Uniform() const;
  // Some host has more than one rank.
  bool AnyShared() const;
};

}  // namespace tessera::collectives
