#include "launcher/malloc_settings.h"

#include <cstdlib>
#include <string_view>

namespace tessera::launcher {

namespace {

constexpr char kThreshold[] = "268435456";  // 256 MiB: see the Note

bool UserSetMalloc() {
  if (std::getenv(kMmapThresholdVariable) != nullptr) return true;
  if (std::getenv(kTrimThresholdVariable) != nullptr) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr &&
         std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> WorkerMallocSettings() {
  if (UserSetMalloc()) return {};
  return {{kMmapThresholdVariable, kThreshold}, {kTrimThresholdVariable, kThreshold}};
}

}  // namespace tessera::launcher
