// Starting a child process from a multi-threaded parent.
//
// Note [Fork in a threaded process]: after fork() the child has only the
// forking thread, and every lock another thread held at that moment — the
// allocator's (a sanitizer's allocator in particular), libc's environment
// lock, a logging mutex — stays locked in the child forever. A child that
// allocates (std::to_string, setenv, std::vector) before exec can therefore
// hang for good, silently: a test then waits its whole timeout for a worker
// that never comes, and tessera-run for a rank that never starts. So Spawn
// prepares everything that allocates before forking — argv, the environment,
// the program's path (PATH is searched in the parent) — and the child makes
// only async-signal-safe calls (dup2, signal, sigprocmask, prctl, execve,
// write, _exit). A failed exec comes back to the parent through a
// close-on-exec pipe, so Spawn returns "cannot run …: <why>" rather than
// leaving a child that exits 127.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

struct SpawnOptions {
  // The command; argv[0] is looked up in PATH unless it contains a '/'.
  std::vector<std::string> argv;
  // Set in the child on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // The child's stdout and stderr both go here when >= 0 (else inherited).
  int output_fd = -1;
  // SIGKILL the child when this process dies (PR_SET_PDEATHSIG), so a
  // crashed parent never leaves children behind. The kernel ties it to the
  // spawning thread: spawn from a thread that outlives the child.
  bool die_with_parent = false;
  // Signals whose handling the child resets to the default (an inherited
  // SIG_IGN would otherwise survive exec).
  std::vector<int> default_signals;
  // The child's signal mask; null: inherited.
  const sigset_t* signal_mask = nullptr;
};

// Starts the child and returns its pid once it has exec'd the program; an
// error naming the program if it could not be found or run.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// The executable that execvp would run for `program`: itself if it contains
// a '/', else the first match in PATH. NotFound if that is not an executable
// file.
absl::StatusOr<std::string> FindProgram(const std::string& program);

}  // namespace tessera
