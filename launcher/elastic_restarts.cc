#include "launcher/elastic_restarts.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "store/elastic_keys.h"
#include "store/elastic_role.h"

namespace tessera::launcher {

ElasticRestarts::ElasticRestarts(std::set<std::string> roles, int max_restarts,
                                 store::StoreClient* store, std::string prefix,
                                 std::string role_dir)
    : roles_(std::move(roles)),
      max_restarts_(max_restarts),
      store_(store),
      prefix_(std::move(prefix)),
      role_dir_(std::move(role_dir)) {}

std::string ElasticRestarts::RoleFile(int rank) const {
  return role_dir_.empty() ? "" : absl::StrCat(role_dir_, "/rank", rank, ".role");
}

ElasticRestarts::Decision ElasticRestarts::OnFailure(int rank, int exit_code, std::string* why) {
  namespace elastic = store::elastic;
  // The worker's own word first: the store may be out of reach.
  absl::StatusOr<std::string> role = absl::NotFoundError("no role file");
  if (auto declared = elastic::ReadRoleFile(RoleFile(rank))) {
    role = *std::move(declared);
  } else {
    role = store_->Get(elastic::RoleKey(prefix_, rank), absl::ZeroDuration());
  }
  if (!role.ok() || roles_.count(*role) == 0) {
    *why = role.ok() ? absl::StrCat("its role '", *role, "' is not elastic")
                     : "it died before declaring a role";
    return Decision::kRestartGroup;
  }
  int& restarts = restarts_[rank];
  if (restarts >= max_restarts_) {
    *why = absl::StrCat("a ", *role, ", out of restarts (", max_restarts_,
                        "); the job goes on without it");
    store_
        ->Set(elastic::LeftKey(prefix_, rank),
              absl::StrCat("tessera-run gave up after ", restarts, " restarts (exit code ",
                           exit_code, ")"))
        .IgnoreError();
    return Decision::kGoOnWithout;
  }
  ++restarts;
  *why = absl::StrCat("a ", *role, "; restarting it alone (", restarts, "/", max_restarts_, ")");
  return Decision::kRestartAlone;
}

absl::Status ElasticRestarts::MarkRestarting(int rank, int exit_code, absl::Duration timeout) {
  // Without the mark a graceful shutdown elsewhere would call it dead.
  return store_->Set(store::elastic::RestartingKey(prefix_, rank),
                     absl::StrCat("exit code ", exit_code), timeout);
}

std::optional<std::string> ElasticRestarts::GoOnWithout(int first, int count,
                                                        const std::string& why) const {
  namespace elastic = store::elastic;
  for (int rank = first; rank < first + count; ++rank) {
    auto role = store_->Get(elastic::RoleKey(prefix_, rank), absl::ZeroDuration());
    if (!role.ok() || roles_.count(*role) == 0) {
      return absl::StrCat(
          "rank ", rank, " on it ",
          role.ok() ? absl::StrCat("is a '", *role, "', not an elastic role") : "declared no role",
          " (--elastic_roles)");
    }
  }
  for (int rank = first; rank < first + count; ++rank) {
    store_->Set(elastic::LeftKey(prefix_, rank), why).IgnoreError();
  }
  return std::nullopt;
}

std::set<std::string> ParseRoles(const std::string& list) {
  std::set<std::string> roles;
  for (absl::string_view role : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    roles.emplace(role);
  }
  return roles;
}

}  // namespace tessera::launcher
