// When the test runner times a test out, its stacks go into the test log.
//
// Bazel ends a test that runs past its timeout with SIGTERM (then SIGKILL),
// and the log stops mid-test: a hang in the test process itself leaves no
// trace of where it was. With this installed, SIGTERM first prints every
// thread's stack (gdb -batch, when installed), then ends the process as
// SIGTERM would. (A worker process that hangs is covered by WorkerProcess,
// which prints its stacks when the test has failed.)
#pragma once

namespace tessera::testing {

// Installs the SIGTERM handler; call once, early, in the test process (not
// in worker scenarios: a launcher's SIGTERM is their normal end).
void PrintStacksOnTermination();

}  // namespace tessera::testing
