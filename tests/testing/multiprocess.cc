#include "tests/testing/multiprocess.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "tests/testing/termination_stacks.h"

namespace tessera::testing {
namespace {

std::map<std::string, Scenario>& Scenarios() {
  static auto* scenarios = new std::map<std::string, Scenario>();
  return *scenarios;
}

constexpr char kFlag[] = "--tessera_worker=";

}  // namespace

bool RegisterScenario(const std::string& name, Scenario scenario) {
  Scenarios()[name] = std::move(scenario);
  return true;
}

WorkerProcess::WorkerProcess(const std::string& scenario,
                             const std::map<std::string, std::string>& env) {
  SpawnOptions spawn;
  spawn.argv = {"/proc/self/exe", std::string(kFlag) + scenario};
  spawn.env.assign(env.begin(), env.end());
  spawn.die_with_parent = true;  // a crashed test never leaves workers behind
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  if (!pid.ok()) {
    ADD_FAILURE() << "cannot start worker scenario " << scenario << ": " << pid.status();
    return;
  }
  pid_ = *pid;
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
}

WorkerProcess::~WorkerProcess() {
  if (exit_code_ < 0 && pid_ > 0) {
    if (::testing::Test::HasFailure()) PrintStacks();
    Kill();
    Wait(absl::Seconds(10));
  }
  if (pidfd_ >= 0) close(pidfd_);
}

int WorkerProcess::Wait(absl::Duration timeout) {
  if (exit_code_ >= 0) return exit_code_;
  struct pollfd pfd = {pidfd_, POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) {
    return -1;
  }
  int status = 0;
  if (waitpid(pid_, &status, 0) != pid_) return -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

void WorkerProcess::PrintStacks() {
  if (pid_ <= 0 || access("/usr/bin/gdb", X_OK) != 0) return;
  std::fprintf(stderr, "--- stacks of worker process %d, still running ---\n", pid_);
  std::fflush(stderr);
  // Bounded: a test that failed must not hang on its diagnosis.
  const std::string command =
      absl::StrCat("timeout 60 /usr/bin/gdb -batch -nx -p ", pid_,
                   " -ex 'thread apply all bt 40' </dev/null 2>&1 | grep -v '^\\[New LWP' >&2");
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "(gdb could not read the stacks of %d)\n", pid_);
  }
}

void WorkerProcess::Kill() {
  if (exit_code_ < 0 && pid_ > 0) ::kill(pid_, SIGKILL);
}

const auth::JobSecret& TestJobSecret() {
  static const auth::JobSecret* secret = [] {
    if (const char* inherited = std::getenv("TESSERA_JOB_SECRET")) {
      return new auth::JobSecret(inherited);
    }
    return new auth::JobSecret(absl::BytesToHexString(auth::RandomBytes(16)));
  }();
  return *secret;
}

std::map<std::string, std::string> WorkerEnv(int rank, int world_size, int store_port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world_size)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(store_port)},
          {"TESSERA_JOB_SECRET", TestJobSecret().value()},
          {"TESSERA_STORE_HOSTED", "1"}};  // the test hosts it
}

std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, n) : std::string();
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

int TestMain(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) == 0) {
      const std::string name = argv[i] + std::strlen(kFlag);
      auto it = Scenarios().find(name);
      if (it == Scenarios().end()) {
        std::fprintf(stderr, "unknown worker scenario '%s'\n", name.c_str());
        return 2;
      }
      try {
        return it->second();
      } catch (const std::exception& e) {
        // The error rule's exceptions, reported by the scenario that threw.
        std::fprintf(stderr, "worker scenario '%s' threw: %s\n", name.c_str(), e.what());
        return 4;
      }
    }
  }
  PrintStacksOnTermination();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace tessera::testing
