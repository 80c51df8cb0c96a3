#include "common/host_load.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_format.h"

namespace tessera {

std::string DescribeHostLoad() {
  std::ifstream in("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  if (!(in >> one >> five >> fifteen)) return "";
  return absl::StrFormat(
      "this host's load average was %.1f, %.1f, %.1f over 1, 5, 15 min on %d CPUs", one, five,
      fifteen, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace tessera
