#include "tests/testing/process_table.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

namespace tessera::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The state letter of /proc/<pid>/stat: after the command's closing ')'.
char StateOf(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

}  // namespace

std::vector<pid_t> ProcessesWithEnv(const std::vector<std::string>& assignments) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string environ = ReadFile("/proc/" + std::to_string(pid) + "/environ");
    std::set<std::string> variables;
    for (size_t start = 0; start < environ.size();) {
      const size_t nul = environ.find('\0', start);
      const size_t stop = nul == std::string::npos ? environ.size() : nul;
      variables.insert(environ.substr(start, stop - start));
      start = stop + 1;
    }
    const bool all = std::all_of(assignments.begin(), assignments.end(),
                                 [&](const std::string& a) { return variables.count(a) > 0; });
    if (all && StateOf(static_cast<pid_t>(pid)) != 'Z') found.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  std::sort(found.begin(), found.end());
  return found;
}

pid_t WorkerPid(const std::string& job, int rank) {
  const std::vector<pid_t> pids =
      ProcessesWithEnv({"TESSERA_TEST_JOB=" + job, "RANK=" + std::to_string(rank)});
  return pids.size() == 1 ? pids[0] : -1;
}

}  // namespace tessera::testing
