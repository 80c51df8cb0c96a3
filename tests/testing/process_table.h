// Finding a job's worker processes from outside, to kill one the way a
// machine or the OOM killer would (SIGKILL): by the environment tessera-run
// gave it, read from /proc — which also sees processes in the PID
// namespaces of tests/testing/network_hosts.h.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::testing {

// Live (not zombie) processes whose environment has every one of
// `assignments` ("NAME=value"), lowest process id first.
std::vector<pid_t> ProcessesWithEnv(const std::vector<std::string>& assignments);

// The one live worker of `rank` (RANK=rank) in the test job whose processes
// have TESSERA_TEST_JOB=`job` in their environment, or -1.
pid_t WorkerPid(const std::string& job, int rank);

}  // namespace tessera::testing
