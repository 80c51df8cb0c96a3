#include "common/subprocess.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

extern char** environ;

namespace tessera {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// "KEY=value" strings: this process's environment with `overrides` applied.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::set<std::string> replaced;
  for (const auto& [key, value] : overrides) replaced.insert(key);
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq == nullptr || replaced.count(std::string(*entry, eq - *entry)) == 0) {
      env.emplace_back(*entry);
    }
  }
  for (const auto& [key, value] : overrides) env.push_back(absl::StrCat(key, "=", value));
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The child between fork and exec: async-signal-safe calls only (see Note [Fork
// in a threaded process]). Reports a failure's errno on `report`.
[[noreturn]] void BecomeChild(const SpawnOptions& options, const char* path, char* const* argv,
                              char* const* envp, pid_t parent, int report) {
  if (options.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
  }
  for (int signal : options.default_signals) ::signal(signal, SIG_DFL);
  if (options.signal_mask != nullptr) ::sigprocmask(SIG_SETMASK, options.signal_mask, nullptr);
  if (options.output_fd >= 0 &&
      (::dup2(options.output_fd, 1) < 0 || ::dup2(options.output_fd, 2) < 0)) {
    const int error = errno;
    [[maybe_unused]] ssize_t n = ::write(report, &error, sizeof(error));
    ::_exit(127);
  }
  ::execve(path, argv, envp);
  const int error = errno;
  [[maybe_unused]] ssize_t n = ::write(report, &error, sizeof(error));
  ::_exit(127);
}

}  // namespace

absl::StatusOr<std::string> FindProgram(const std::string& program) {
  if (program.empty()) return absl::InvalidArgumentError("no program to run");
  if (program.find('/') != std::string::npos) {
    if (IsExecutableFile(program)) return program;
    return absl::NotFoundError(absl::StrCat("cannot run '", program, "': no such executable file"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("cannot run '", program, "': not found in PATH"));
}

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Spawn: no command");
  TESSERA_ASSIGN_OR_RETURN(auto path, FindProgram(options.argv[0]));
  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = ChildEnvironment(options.env);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("Spawn: pipe: ", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) BecomeChild(options, path.c_str(), argv.data(), envp.data(), parent, report[1]);
  ::close(report[1]);
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    return absl::ResourceExhaustedError(absl::StrCat("Spawn: fork: ", std::strerror(error)));
  }
  // Returns 0 bytes once exec has closed the child's end (success), or the
  // errno of what failed.
  int error = 0;
  ssize_t got;
  do {
    got = ::read(report[0], &error, sizeof(error));
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == 0) return pid;
  ::waitpid(pid, nullptr, 0);
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot run '", path, "': ", got == sizeof(error) ? std::strerror(error) : "exec failed"));
}

}  // namespace tessera
