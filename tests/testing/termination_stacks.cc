#include "tests/testing/termination_stacks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tessera::testing {
namespace {

// Built before any signal: the handler only forks, execs and waits.
char pid_text[16];
char gdb[] = "/usr/bin/gdb";
char batch[] = "-batch";
char no_init[] = "-nx";
char attach[] = "-p";
char command[] = "-ex";
char backtrace[] = "thread apply all bt 40";
char* gdb_argv[] = {gdb, batch, no_init, attach, pid_text, command, backtrace, nullptr};

void WriteError(const char* text) {
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void OnTermination(int) {
  WriteError("\n--- SIGTERM (the test runner's timeout?): stacks of the test process ---\n");
  // _Fork: fork without the atfork handlers, safe in a signal handler.
  const pid_t child = _Fork();
  if (child == 0) {
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execv(gdb_argv[0], gdb_argv);
    _exit(127);
  }
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
  }
  signal(SIGTERM, SIG_DFL);
  raise(SIGTERM);
}

}  // namespace

void PrintStacksOnTermination() {
  if (access(gdb, X_OK) != 0) return;
  std::snprintf(pid_text, sizeof(pid_text), "%d", static_cast<int>(getpid()));
  struct sigaction action {};
  action.sa_handler = OnTermination;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace tessera::testing
