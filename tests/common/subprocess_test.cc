// Spawn: the child gets the command, the environment with the overrides, the
// output descriptor and default signal handling asked for; a program that
// cannot be run is an error in the parent naming it and why, not a child
// exiting 127.
#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace tessera {
namespace {

// Runs `options` with its output captured; returns the output and sets
// `status` to the child's wait status.
std::string RunCapturing(SpawnOptions options, int* status) {
  int fds[2];
  EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
  options.output_fd = fds[1];
  absl::StatusOr<pid_t> pid = Spawn(options);
  close(fds[1]);
  EXPECT_TRUE(pid.ok()) << pid.status();
  std::string output;
  char buffer[256];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) output.append(buffer, n);
  close(fds[0]);
  if (pid.ok()) {
    EXPECT_EQ(waitpid(*pid, status, 0), *pid);
  }
  return output;
}

// A file in the test's temporary directory with `mode`.
std::string TempFile(const std::string& name, const std::string& content, mode_t mode) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

TEST(SpawnTest, RunsTheCommandFoundInPathWithTheEnvironmentOverridden) {
  setenv("SPAWN_TEST_KEPT", "inherited", 1);
  setenv("SPAWN_TEST_REPLACED", "old", 1);
  SpawnOptions options;
  options.argv = {"sh", "-c", "echo \"$SPAWN_TEST_KEPT $SPAWN_TEST_REPLACED $SPAWN_TEST_NEW $0\"",
                  "first-arg"};
  options.env = {{"SPAWN_TEST_REPLACED", "new"}, {"SPAWN_TEST_NEW", "added"}};
  int status = -1;
  EXPECT_EQ(RunCapturing(options, &status), "inherited new added first-arg\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(SpawnTest, StderrGoesToTheOutputToo) {
  SpawnOptions options;
  options.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  int status = -1;
  EXPECT_EQ(RunCapturing(options, &status), "out\nerr\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
}

TEST(SpawnTest, AMissingProgramIsAnErrorNamingIt) {
  SpawnOptions options;
  options.argv = {"tessera-no-such-program"};
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
  EXPECT_NE(pid.status().message().find("'tessera-no-such-program': not found in PATH"),
            std::string::npos)
      << pid.status();

  options.argv = {"/nonexistent/dir/program"};
  pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("'/nonexistent/dir/program'"), std::string::npos)
      << pid.status();
}

TEST(SpawnTest, ANonExecutableFileIsAnError) {
  SpawnOptions options;
  options.argv = {TempFile("not_executable", "#!/bin/sh\nexit 0\n", 0644)};
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("no such executable file"), std::string::npos)
      << pid.status();
}

// The file passes the parent's checks; exec itself refuses it, in the child,
// and the child's errno comes back.
TEST(SpawnTest, AFailedExecIsReportedByTheParent) {
  SpawnOptions options;
  options.argv = {TempFile("not_a_program",
                           "\x7f"
                           "ELF but not really",
                           0755)};
  absl::StatusOr<pid_t> pid = Spawn(options);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
  EXPECT_NE(pid.status().message().find("Exec format error"), std::string::npos) << pid.status();
}

// A shell keeps a signal ignored on entry ignored; the child starts with
// the default action only when asked.
TEST(SpawnTest, DefaultSignalsUndoAnInheritedIgnore) {
  signal(SIGTERM, SIG_IGN);
  SpawnOptions options;
  options.argv = {"sh", "-c", "kill -TERM $$; echo survived"};
  int status = -1;
  EXPECT_EQ(RunCapturing(options, &status), "survived\n");
  options.default_signals = {SIGTERM};
  EXPECT_EQ(RunCapturing(options, &status), "");
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  signal(SIGTERM, SIG_DFL);
}

}  // namespace
}  // namespace tessera
