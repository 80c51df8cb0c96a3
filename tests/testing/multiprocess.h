// Multi-process test support: real worker processes on 127.0.0.1.
//
// A test binary re-executes itself (/proc/self/exe) with
// --tessera_worker=<scenario>; TestMain() runs that scenario instead of the
// tests. Workers meet the test through a store the test hosts on a free port.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>

#include "absl/time/time.h"
#include "auth/job_secret.h"

namespace tessera::testing {

using Scenario = std::function<int()>;

// Registers a worker scenario; use TESSERA_WORKER_SCENARIO.
bool RegisterScenario(const std::string& name, Scenario scenario);

#define TESSERA_WORKER_SCENARIO(name)                                  \
  static int name##_scenario();                                        \
  static const bool name##_registered =                                \
      ::tessera::testing::RegisterScenario(#name, &name##_scenario);   \
  static int name##_scenario()

// A child process running one scenario.
class WorkerProcess {
 public:
  // Starts `scenario` with the given extra environment variables.
  WorkerProcess(const std::string& scenario,
                const std::map<std::string, std::string>& env);
  // Kills the child if it is still running; first, when the test has
  // failed, prints the child's thread stacks to stderr (with gdb, when
  // installed): a worker that hung is then diagnosable from CI's log alone.
  ~WorkerProcess();

  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Exit code, 128+signal if killed, or -1 if it did not exit in time.
  int Wait(absl::Duration timeout);
  void Kill();
  // Every thread's stack of the running child, to stderr (gdb -batch).
  void PrintStacks();

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int exit_code_ = -1;
};

// The job secret of this test's workers: random per test process, passed
// to children in TESSERA_JOB_SECRET by WorkerEnv.
const auth::JobSecret& TestJobSecret();

// Environment for an RPC worker of rank `rank` (with TestJobSecret()). The
// RPC backend is inherited: TESSERA_RPC_BACKEND, set per test target.
std::map<std::string, std::string> WorkerEnv(int rank, int world_size, int store_port);

// This test binary's path, to run it as a worker program (e.g. under
// tessera-run with --tessera_worker=<scenario>).
std::string SelfPath();

// A TCP port free on 127.0.0.1 now, for a store the test's processes must
// be told in advance (a new network namespace has it free as well).
int FreeLoopbackPort();

// Entry point for test binaries: dispatches worker scenarios, else runs gtest.
int TestMain(int argc, char** argv);

}  // namespace tessera::testing
