// A worker's role (RpcOptions::role: "trainer", "replica", ...), declared
// to everyone through the store (RoleKey, see Note [Elastic keys]) and to its
// own node's launcher through a file (TESSERA_ROLE_FILE, set by
// tessera-run): a launcher cut off from the store must still know whether a
// worker that died restarts alone (see Note [Restarting a rank alone],
// launcher/elastic_restarts.h).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "store/store_client.h"

namespace tessera::store::elastic {

// Records `role` for `rank` under `prefix` in the store, and in the file
// TESSERA_ROLE_FILE names, if set.
absl::Status DeclareRole(StoreClient& store, const std::string& prefix, int rank,
                         const std::string& role);

// The launcher's side: the role a worker wrote to `file`, if it did.
std::optional<std::string> ReadRoleFile(const std::string& file);

}  // namespace tessera::store::elastic
