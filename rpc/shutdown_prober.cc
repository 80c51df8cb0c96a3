#include "rpc/shutdown_prober.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/await_call.h"
#include "store/elastic_keys.h"

namespace tessera::rpc {

ShutdownProber::ShutdownProber(const RpcOptions& options, store::StoreClient& store,
                               const Membership& membership, Ping ping, Describe describe)
    : options_(options),
      store_(store),
      membership_(membership),
      ping_(std::move(ping)),
      describe_(std::move(describe)) {}

absl::Status ShutdownProber::ProbeMissing(const std::vector<int>& ranks) {
  std::vector<std::pair<int, Future<bool>>> probes;
  for (int rank : ranks) {
    if (rank == options_.rank) continue;
    probes.emplace_back(rank, ping_(rank, kProbeTimeout));
  }
  for (auto& [rank, probe] : probes) {
    auto answer = AwaitCall(probe, kProbeTimeout);
    if (answer.ok()) {
      unanswered_probes_.erase(rank);
      silent_since_.erase(rank);
    } else if (AbsenceExcused(rank)) {
      continue;  // restarting, or gone for good (see Note [Elastic membership])
    } else if (absl::IsUnavailable(answer.status())) {
      return absl::UnavailableError(absl::StrCat("graceful shutdown: ", describe_(rank),
                                                 " is gone (", answer.status().message(), ")"));
    } else if (++unanswered_probes_[rank] >= kProbesBeforeGivingUp) {
      return absl::DeadlineExceededError(
          absl::StrCat("graceful shutdown: ", describe_(rank), " has not answered ",
                       kProbesBeforeGivingUp, " liveness probes (",
                       absl::FormatDuration(kProbeTimeout), " each): ", answer.status().message()));
    }
  }
  return absl::OkStatus();
}

bool ShutdownProber::AbsenceExcused(int rank) {
  namespace elastic = store::elastic;
  const std::string& prefix = options_.store_prefix;
  if (const auto known = membership_.Find(rank); !known.has_value() || known->incarnation < 0) {
    // Handed out to a joining worker (tessera-run --join) that has not
    // announced itself yet: it is starting, not gone — for as long as a
    // rendezvous may take (on a loaded host loading LibTorch alone takes
    // seconds; three quick probes were not enough). Then it is probed as
    // any other rank.
    const absl::Time since = joining_since_.try_emplace(rank, absl::Now()).first->second;
    return absl::Now() - since < options_.rendezvous_timeout;
  }
  joining_since_.erase(rank);
  if (store_.Get(elastic::LeftKey(prefix, rank), absl::ZeroDuration()).ok()) return true;
  if (store_.Get(elastic::RestartingKey(prefix, rank), absl::ZeroDuration()).ok()) {
    // A restart that never comes back (its launcher died too) is a death
    // after all.
    const absl::Time since = restarting_since_.try_emplace(rank, absl::Now()).first->second;
    return absl::Now() - since < 2 * options_.rendezvous_timeout;
  }
  restarting_since_.erase(rank);
  auto roles = store_.Get(elastic::ElasticRolesKey(prefix), absl::ZeroDuration());
  auto role = store_.Get(elastic::RoleKey(prefix, rank), absl::ZeroDuration());
  if (!roles.ok() || !role.ok() || role->empty()) return false;
  const std::vector<std::string> elastic_roles = absl::StrSplit(*roles, ',');
  if (std::find(elastic_roles.begin(), elastic_roles.end(), *role) == elastic_roles.end()) {
    return false;
  }
  // The launcher marks it as soon as it reaps the process: a few probes —
  // unless its whole node may be gone, which the job's launchers take up
  // to --node_timeout to declare (then the rank is left).
  auto node_timeout =
      elastic::ReadNumber(store_, elastic::NodeTimeoutKey(prefix), absl::ZeroDuration());
  if (!node_timeout.ok()) return ++unanswered_probes_[rank] < kProbesBeforeGivingUp;
  const absl::Time silent_since = silent_since_.try_emplace(rank, absl::Now()).first->second;
  return absl::Now() - silent_since < absl::Seconds(*node_timeout) + kNodeVerdictSlack;
}

}  // namespace tessera::rpc
