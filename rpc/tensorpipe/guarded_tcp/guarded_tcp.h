// A TensorPipe transport over TCP that does not trust its peer.
//
// Same wire framing as TensorPipe's uv transport (an 8-byte length, then the
// bytes), but: a frame of unknown size larger than `max_frame_bytes` is an
// error for that connection instead of an allocation of whatever the peer
// claimed; a frame read into a caller's buffer must have exactly the
// expected length (uv only DCHECKs it, so a peer could overrun the buffer);
// an unparsable or truncated control object fails the connection instead of
// throwing on the event loop or reading past its frame (bounded_nop.h); the
// listener keeps accepting after a bad connection; and both ends prove the
// job secret before TensorPipe sees a byte (secret_gate.h). See
// docs/security.md.
//
// Registered by the TensorPipe agent under the name "tcp" in place of "uv".
//
// The same transport runs on abstract Unix-domain sockets between workers of
// one host (CreateGuardedUnixTransport): the agent's default same-host path,
// see Note [Same-host transport] in rpc/tensorpipe/transport_choice.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc {

struct GuardedTcpOptions {
  // Largest control frame accepted (TensorPipe descriptors carry Tessera's
  // envelope, so this bounds it too). Tensor payloads are read into buffers
  // the reader sized from validated metadata, so they are not limited here.
  size_t max_frame_bytes = size_t{64} << 20;
  // The host a listener reports as its address (with its bound port), when
  // not the one it listens on. TensorPipe sends a listener's address to its
  // peers inside the pipe handshake, and they open the channels' extra
  // connections to it: a wildcard (0.0.0.0) or a NAT-private address there
  // would send them to the wrong host.
  std::string advertise_host;
  // Proved by both ends of every connection before TensorPipe reads a byte
  // of it (see Note [Transport gate], secret_gate.h). Empty: proves nothing.
  auth::JobSecret secret;
  // How long a connecting side dials a busy listener again (see Note [Connect
  // again], connect_retry.h).
  absl::Duration connect_budget = absl::Seconds(60);
};

std::shared_ptr<tensorpipe::transport::Context> CreateGuardedTcpTransport(
    const GuardedTcpOptions& options);

// The guarded transport over abstract Unix-domain sockets (listen and
// connect addresses "@name"; advertise_host is ignored). Its domain
// descriptor names this kernel boot and network namespace — where an
// abstract name is reachable — so TensorPipe chooses it only between
// workers that can really reach each other through it. Its epoll loop
// sleeps while idle, unlike TensorPipe's shm reactor.
std::shared_ptr<tensorpipe::transport::Context> CreateGuardedUnixTransport(
    const GuardedTcpOptions& options);

// The domain descriptor CreateGuardedUnixTransport's contexts carry.
std::string UnixDomainDescriptor();

}  // namespace tessera::rpc
