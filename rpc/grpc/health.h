// The standard grpc.health.v1.Health service (Check and Watch), answered by
// the agent's own streams on its CompletionLoop.
//
// gRPC's built-in health service runs on the callback API, whose threads
// join this process's gRPC event polling and add a thread hop to the
// agent's messages (see completion_loop.h); answering here keeps the same
// protocol without them. The messages are two one-field protobufs, encoded
// by hand: HealthCheckRequest{string service = 1} and
// HealthCheckResponse{ServingStatus status = 1}.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/statusor.h"

namespace tessera::rpc {

enum class HealthMethod { kNone, kCheck, kWatch };

// Which health method `method` (a full gRPC method name) is, if any.
HealthMethod HealthMethodOf(const std::string& method);

// The HealthCheckResponse to `request`: SERVING or NOT_SERVING for the
// services a worker has ("" and tessera.proto.Worker); NOT_FOUND for others.
absl::StatusOr<grpc::ByteBuffer> HealthResponse(const grpc::ByteBuffer& request, bool serving);

}  // namespace tessera::rpc
