#include "store/elastic_role.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "store/elastic_keys.h"

namespace tessera::store::elastic {

absl::Status DeclareRole(StoreClient& store, const std::string& prefix, int rank,
                         const std::string& role) {
  if (const char* file = std::getenv("TESSERA_ROLE_FILE"); file != nullptr && *file != '\0') {
    // Written whole, then renamed: the launcher never reads half a role.
    const std::string partial = std::string(file) + ".partial";
    std::ofstream(partial, std::ios::trunc) << role;
    if (std::rename(partial.c_str(), file) != 0) {
      return absl::InternalError("cannot write the role file " + std::string(file));
    }
  }
  return store.Set(RoleKey(prefix, rank), role);
}

std::optional<std::string> ReadRoleFile(const std::string& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream role;
  role << in.rdbuf();
  return role.str();
}

}  // namespace tessera::store::elastic
