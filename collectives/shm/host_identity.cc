#include "collectives/shm/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tessera::collectives {
namespace {

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

// "dev:inode" of `path`, or "" when it cannot be read.
std::string FileIdentity(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "";
  return absl::StrCat(st.st_dev, ":", st.st_ino);
}

}  // namespace

std::string SharedMemoryHostIdentity() {
  const std::string boot = BootId();
  const std::string net = FileIdentity("/proc/self/ns/net");
  const std::string shm = FileIdentity("/dev/shm");
  if (boot.empty() || net.empty() || shm.empty()) {
    // Shares with nobody: a process-unique identity.
    return absl::StrCat("unshared:", boot, ":", ::getpid(), ":", net);
  }
  return absl::StrCat(boot, "/net:", net, "/shm:", shm);
}

}  // namespace tessera::collectives
