// How much CPU a process has used: what tells a sleeping worker from one
// that polls (bench/idle_worker, tests/rpc/same_host_transport_test).
#pragma once

#include <sys/types.h>

namespace tessera {

// CPU seconds (user + system) process `pid` has used so far, from
// /proc/<pid>/stat; -1 if it cannot be read (no such process).
double ProcessCpuSeconds(pid_t pid);

}  // namespace tessera
