// AllowList: which workers may call a registered function or use a
// registered class, by worker name or by role (RpcOptions::role).
//
//   registry.Register("shutdown_job", fn, rpc::AllowList{{"coordinator"}, {}});
//   classes.Class<ParameterServer>("ParameterServer")
//       .AllowCallers(rpc::AllowList{{}, {"trainer"}});
//
// An empty list allows every worker of the job (each already proved the job
// secret, rpc/auth/). Checked before the call's arguments are decoded; a
// denied call fails with PermissionDenied naming the function and caller.
// Names and roles are what workers claim at rendezvous: every job member
// knows the secret, so the list separates duties, not mutually distrusting
// parties.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::rpc {

struct AllowList {
  std::vector<std::string> workers;
  std::vector<std::string> roles;

  bool empty() const { return workers.empty() && roles.empty(); }

  bool Allows(const std::string& worker, const std::string& role) const {
    if (empty()) return true;
    auto contains = [](const std::vector<std::string>& list, const std::string& item) {
      return std::find(list.begin(), list.end(), item) != list.end();
    };
    return contains(workers, worker) || (!role.empty() && contains(roles, role));
  }

  // OK, or PermissionDenied naming `what` (e.g. "function 'step'").
  absl::Status Check(const std::string& what, const std::string& worker,
                     const std::string& role) const {
    if (Allows(worker, role)) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "permission denied: worker '", worker, "'",
        role.empty() ? "" : absl::StrCat(" (role '", role, "')"), " may not call ", what));
  }
};

}  // namespace tessera::rpc
