// Note [Descriptor limit]: a worker holds a few descriptors for each peer it
// talks to (a pipe's connection and its channels' connections, on each
// side): an all-to-all among 64 workers needs about 400, among 128 about
// 800, a server with hundreds of clients more, and tessera-run holds two
// pipes per worker and the store's connection from each. Many systems still
// set a soft limit of 1024 (or less), past which connects and accepts fail
// with EMFILE. As Go's runtime and Ray's workers do, Tessera's processes
// raise the soft limit to the hard one (the administrator's bound) at start:
// rpc::TryInit and tessera-run (whose workers inherit it).
#pragma once

namespace tessera {

// Raises this process's soft RLIMIT_NOFILE to its hard limit (once; a
// failure leaves the limit as it was).
void RaiseDescriptorLimit();

}  // namespace tessera
