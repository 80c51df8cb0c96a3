#include "common/process_cpu.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace tessera {

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The fields after the command name, which is in parentheses and may hold
  // spaces: the third field of proc(5) comes first; utime and stime are the
  // 14th and 15th, in clock ticks.
  const auto name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 > stat.size()) return -1;
  std::istringstream fields(stat.substr(name_end + 2));
  std::string field;
  long long utime = -1, stime = -1;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  if (utime < 0 || stime < 0) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace tessera
