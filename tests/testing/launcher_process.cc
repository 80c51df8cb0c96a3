#include "tests/testing/launcher_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <regex>

#include "absl/time/clock.h"
#include "common/subprocess.h"

namespace tessera::testing {

namespace {

std::vector<std::string> TesseraRun(std::vector<std::string> args,
                                    const std::vector<std::string>& wrapper) {
  args.insert(args.begin(), "launcher/tessera-run");
  args.insert(args.begin(), wrapper.begin(), wrapper.end());
  return args;
}

}  // namespace

double FirstNumber(const std::string& text, const std::string& pattern) {
  std::smatch match;
  if (!std::regex_search(text, match, std::regex(pattern))) return -1;
  return std::atof(match[1].str().c_str());
}

Launcher::Launcher(std::vector<std::string> args, std::vector<std::string> wrapper)
    : ObservedProcess(TesseraRun(std::move(args), wrapper)) {}

ObservedProcess::ObservedProcess(std::vector<std::string> argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.output_fd = fds[1];
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    ADD_FAILURE() << pid.status();
    close(fds[0]);
    return;
  }
  pid_ = *pid;
  fd_ = fds[0];
}

ObservedProcess::~ObservedProcess() {
  if (exit_code_ < 0 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Finish(absl::Seconds(10));
  }
  if (fd_ >= 0) close(fd_);
}

bool ObservedProcess::WaitFor(const std::string& text, int count, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Count(text) < count) {
    if (!ReadSome(deadline)) return false;
  }
  return true;
}

int ObservedProcess::Finish(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (ReadSome(deadline)) {
  }
  // Bounded wait for the launcher itself.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  pollfd pfd{pidfd, POLLIN, 0};
  const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  const bool exited = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX))) > 0;
  close(pidfd);
  if (!exited) return -1;
  int status = 0;
  if (waitpid(pid_, &status, 0) != pid_) return -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

void ObservedProcess::Drain() {
  while (ReadSome(absl::Now())) {
  }
}

int ObservedProcess::Count(const std::string& text) const {
  int n = 0;
  for (size_t at = output_.find(text); at != std::string::npos; at = output_.find(text, at + 1)) {
    ++n;
  }
  return n;
}

bool ObservedProcess::ReadSome(absl::Time deadline) {
  if (fd_ < 0) return false;
  pollfd pfd{fd_, POLLIN, 0};
  const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX))) <= 0) return false;
  char buffer[4096];
  const ssize_t n = read(fd_, buffer, sizeof(buffer));
  if (n <= 0) {
    close(fd_);
    fd_ = -1;
    return false;
  }
  output_.append(buffer, n);
  return true;
}

}  // namespace tessera::testing
