// How busy this host's CPUs have been, for an error a deadline ended: on a
// loaded machine the deadline, not the peer, may be what went wrong, and
// the message should let the user see that (see Note [Slow is not failed],
// store/store_backend.h).
#pragma once

#include <string>

namespace tessera {

// "this host's load average was 131.2, 96.0, 40.1 over 1, 5, 15 min on 2
// CPUs", or "" where /proc/loadavg cannot be read.
std::string DescribeHostLoad();

}  // namespace tessera
