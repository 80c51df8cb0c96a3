// Factory for the gRPC backend of RpcAgent (RpcOptions::backend = kGrpc).
//
// For networks where only HTTP/2 passes, service meshes, health probes and
// other languages' clients. Each worker serves proto/worker_service.proto's
// Worker.Exchange plus the standard grpc.health.v1.Health (and, if asked
// for, server reflection); each ordered pair of workers shares one
// bidirectional stream (the caller's requests out, their responses back),
// opened on first use. Streams run on the agent's own completion queue
// (rpc/grpc/completion_loop.h), handlers on the runtime's executor.
// The envelopes are TensorPipe's; tensors travel as raw slices
// (rpc/grpc/frame_codec.h). Every stream starts with the job-secret
// handshake (rpc/auth/handshake.h); with `tls` set, over TLS as well.
#pragma once

#include <climits>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/deadline_timer.h"
#include "common/executor.h"
#include "rpc/auth/job_secret.h"
#include "rpc/codec.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

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
  // As TensorPipeOptions: where to listen, and what peers dial (empty: the
  // same); the runtime sets both (common/host_address.h).
  std::string listen_host = "127.0.0.1";
  std::string advertise_host;
  // Set from RpcOptions::limits by the runtime.
  CodecLimits limits;
  // Largest frame sent or accepted, envelope plus tensor bytes; gRPC's own
  // ceiling is 2 GiB - 1. Larger messages fail with ResourceExhausted.
  size_t max_message_bytes = INT_MAX;
  // How long a connecting peer has to complete the handshake — gRPC's
  // HTTP/2 set-up as well as Tessera's.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Threads that run the streams' gRPC completions (decoding frames,
  // handing requests to the executor, which runs the handlers). One is
  // fastest here: threads sharing a queue hand its events to each other
  // (measured: 2 threads, 156-180 µs round trip; 1 thread, 114-144 µs).
  int completion_threads = 1;
  // Serve gRPC server reflection (grpc.reflection.v1alpha). Off by default:
  // gRPC runs it on synchronous-server threads, which join this process's
  // event polling and cost every agent message a thread hop (measured in
  // docs/benchmarks.md). TESSERA_GRPC_REFLECTION=1 turns it on.
  bool reflection = false;
  GrpcTlsOptions tls;
};

// Call before this process first uses gRPC (the runtime does, before its
// store client). Selects gRPC's "poll" poller unless GRPC_POLL_STRATEGY is
// set: with the default epoll poller any thread blocked in gRPC — a store
// call waiting at shutdown, a sync server's threads — may take the agent's
// socket events and hand them to its loop thread, a thread hop per message
// (measured in docs/benchmarks.md); "poll" keeps each queue's connections
// with that queue's threads. A gRPC already started keeps its poller.
void PrepareProcessForGrpcAgent();

// `executor` runs handlers; `timer` fires deadlines. Both outlive the agent.
absl::StatusOr<std::unique_ptr<RpcAgent>> CreateGrpcAgent(
    const GrpcOptions& options, const JobSecret& secret, const std::string& name, int rank,
    RequestHandler handler, Executor* executor, DeadlineTimer* timer);

// The full name of the stream method, for clients in other languages.
inline constexpr char kWorkerExchangeMethod[] = "/tessera.proto.Worker/Exchange";

}  // namespace tessera::rpc
