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
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"

namespace tessera::rpc {

// Call before this process first uses gRPC (the runtime does, before its
// store client). Selects gRPC's "poll" poller unless GRPC_POLL_STRATEGY is
// set: with the default epoll poller any thread blocked in gRPC — a store
// call waiting at shutdown, a sync server's threads — may take the agent's
// socket events and hand them to its loop thread, a thread hop per message
// (measured in docs/benchmarks-history.md); "poll" keeps each queue's connections
// with that queue's threads. A gRPC already started keeps its poller.
void PrepareProcessForGrpcAgent();

// `setup.executor` runs handlers; `setup.timer` fires deadlines. Both
// outlive the agent.
absl::StatusOr<std::unique_ptr<RpcAgent>> CreateGrpcAgent(AgentSetup setup);

// The full name of the stream method, for clients in other languages.
inline constexpr char kWorkerExchangeMethod[] = "/tessera.proto.Worker/Exchange";

}  // namespace tessera::rpc
