// Which processes can share memory: ranks whose host identities are equal
// are put in one shared-memory group (collectives/shm/shm_group_setup.h).
//
// The identity is what the processes really share, not a host name: the
// kernel's boot id (one running kernel), the network namespace (as the RPC
// layer's same-host transports, whose abstract Unix sockets live there;
// tests/multihost's network hosts are separate hosts, as they are to RPC)
// and the device and inode of /dev/shm (one tmpfs; a container with its own
// /dev/shm is another host for this purpose). A rank that cannot read one
// of them reports a unique identity and so shares with nobody.
#pragma once

#include <string>

namespace tessera::collectives {

std::string SharedMemoryHostIdentity();

}  // namespace tessera::collectives
