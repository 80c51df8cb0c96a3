// Frames of the gRPC agent: a Message as the bytes of proto::Frame
// (proto/worker_service.proto), built from and read as raw slices.
//
// Sending copies no tensor bytes: each tensor becomes a slice over its own
// memory that keeps the tensor alive until gRPC has written it. Receiving
// copies each tensor once, from gRPC's slices into its receive buffer, after
// every length and count was checked against the codec limits — a hostile
// frame cannot make us allocate more than it announced and the limits allow.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "rpc/buffer_pool.h"
#include "rpc/codec.h"
#include "rpc/message.h"

namespace tessera::rpc {

// Frame bytes for `message`; ResourceExhausted if they exceed `max_bytes`.
absl::StatusOr<grpc::ByteBuffer> EncodeFrame(const Message& message, size_t max_bytes);

// A frame of just `envelope` (the handshake's steps; never over any limit).
grpc::ByteBuffer EncodeEnvelopeFrame(proto::Envelope envelope);

// The message in `frame`; InvalidArgument naming what is wrong otherwise.
absl::StatusOr<Message> DecodeFrame(const grpc::ByteBuffer& frame, const CodecLimits& limits,
                                    BufferPool* buffers);

}  // namespace tessera::rpc
