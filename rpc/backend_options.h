// The options of the RPC backends (TensorPipe, gRPC): plain settings that
// RpcOptions carries, so the runtime core names them without including a
// backend (the backends include this; rpc/init.h makes their agents). Only
// each backend's own: what every backend takes — where to listen, the
// limits, idle connections, queues, the secret — is declared once, in
// RpcOptions, and reaches the agent through its AgentSetup.
#pragma once

#include <climits>
#include <string>

#include "absl/time/time.h"

namespace tessera::rpc {

enum class TcpTransport {
  kGuarded,  // bounded frames, survives hostile peers (default)
  kUv,       // TensorPipe's libuv transport: trusts every peer
};

enum class SameHostTransport {
  // The guarded transport on abstract Unix sockets, with the cma channel:
  // sleeps while idle (default).
  kUnixSockets,
  // TensorPipe's shm transport: a little lower latency, but its reactor
  // busy-polls one core per process for the whole job.
  kSharedMemory,
  // No same-host path: TCP and the basic channel, exactly as between hosts
  // (to measure the cross-host path on one machine).
  kTcp,
};

struct TensorPipeOptions {
  // How workers on one host reach each other (see Note [Same-host transport],
  // rpc/tensorpipe/transport_choice.cc). TESSERA_TENSORPIPE_SAME_HOST=
  // unix|shm|tcp overrides it; TESSERA_TENSORPIPE_SHM=0 means tcp.
  SameHostTransport same_host = SameHostTransport::kUnixSockets;
  // Allow the cma channel (tensor bytes copied straight from the sender's
  // memory) between workers of one host; never with SameHostTransport::kTcp.
  bool enable_cma = true;
  TcpTransport tcp = TcpTransport::kGuarded;
  // How long a connecting peer has to complete the handshake, and how long
  // a connecting side dials a busy listener again. Generous: on
  // the guarded transports a peer that gets this far proved the job secret
  // at the transport gate, so the bound only reclaims a member's stalled
  // pipe — and on a host running a connection storm (128 workers on two
  // cores) a member's handshake took over 10 s (see Note [Connect again]).
  // TESSERA_HANDSHAKE_TIMEOUT_S sets it.
  absl::Duration handshake_timeout = absl::Seconds(60);
};

// Certificates and keys are PEM files.
struct GrpcTlsOptions {
  std::string cert_chain_file;   // this worker's certificate
  std::string private_key_file;  // and its key
  std::string root_certs_file;   // the CA that signed the peers' certificates
  // Mutual TLS: servers require and verify client certificates (each
  // worker presents cert_chain_file as a client too).
  bool mutual = false;
  // The name to verify in peers' certificates instead of their address.
  std::string target_name_override;

  bool enabled() const { return !cert_chain_file.empty(); }

  // From TESSERA_TLS_CERT_FILE, TESSERA_TLS_KEY_FILE, TESSERA_TLS_CA_FILE
  // and TESSERA_TLS_MUTUAL=1; disabled when the first is unset.
  static GrpcTlsOptions FromEnv();
};

struct GrpcOptions {
  // Largest frame sent or accepted, envelope plus tensor bytes; gRPC's own
  // ceiling is 2 GiB - 1. Larger messages fail with ResourceExhausted.
  size_t max_message_bytes = INT_MAX;
  // How long a connecting peer has to complete the handshake — gRPC's
  // HTTP/2 set-up as well as Tessera's. 60 s, as TensorPipe's: with 10 s,
  // an all-to-all of 128 workers on two cores failed (servers closed
  // connections whose HTTP/2 preface they had not got to yet). The price:
  // a silent stranger holds a descriptor that long (gRPC has no gate to
  // make room). TESSERA_HANDSHAKE_TIMEOUT_S sets both backends' bound.
  absl::Duration handshake_timeout = absl::Seconds(60);
  // Threads that run the streams' gRPC completions (decoding frames,
  // handing requests to the executor, which runs the handlers). One is
  // fastest here: threads sharing a queue hand its events to each other
  // (measured: 2 threads, 156-180 µs round trip; 1 thread, 114-144 µs).
  int completion_threads = 1;
  // Serve gRPC server reflection (grpc.reflection.v1alpha). Off by default:
  // gRPC runs it on synchronous-server threads, which join this process's
  // event polling and cost every agent message a thread hop (measured in
  // docs/benchmarks-history.md). TESSERA_GRPC_REFLECTION=1 turns it on.
  bool reflection = false;
  GrpcTlsOptions tls;
};

}  // namespace tessera::rpc
