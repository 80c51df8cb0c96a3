// Codec: c10::IValue <-> proto::Value, with tensors carried out of band.
//
// Encoding appends each tensor (made contiguous; a view sends only its own
// elements) to Message::tensors and its metadata to Envelope.tensors.
// Decoding never trusts the peer: AllocateTensors() checks every TensorMeta
// against the byte lengths the transport announced and against the limits
// before allocating, and DecodeValue() checks indices and nesting depth.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/rpc.pb.h"
#include "rpc/buffer_pool.h"
#include "rpc/message.h"
#include "rpc/value_traits.h"

namespace tessera::rpc {

// Encodes and decodes values the codec does not know itself — RRefs, which
// carry protocol side effects (forks) and so live in rref/, above rpc/.
class ValueHooks {
 public:
  virtual ~ValueHooks() = default;
  // Encodes an RRef being sent to worker `to_rank`.
  virtual absl::Status EncodeRRef(const c10::IValue& rref, int to_rank,
                                  proto::RRefHandle* out) = 0;
  // Decodes an RRef received from worker `from_rank`.
  virtual absl::StatusOr<c10::IValue> DecodeRRef(const proto::RRefHandle& handle,
                                                 int from_rank) = 0;
};

// Where a value goes to or comes from, for ValueHooks; no hooks, no RRefs.
struct Peer {
  ValueHooks* hooks = nullptr;
  int rank = -1;
};

struct CodecLimits {
  // Deepest nesting of lists/dicts accepted.
  int max_depth = 64;
  // Most tensors in one message.
  size_t max_tensors = 1 << 16;
  // Most dimensions of one tensor.
  size_t max_dims = 64;
  // Most tensor bytes in one message.
  uint64_t max_tensor_bytes = uint64_t{16} << 30;
  // Largest serialized envelope (tensor bytes travel outside it).
  size_t max_envelope_bytes = size_t{64} << 20;
};

// Encodes `value` into `out`; tensors go to `message` (see header comment).
absl::Status EncodeValue(const c10::IValue& value, proto::Value* out,
                         Message* message, const CodecLimits& limits = {},
                         Peer peer = {});

// Decodes `value`, taking tensors from `tensors` by index.
absl::StatusOr<c10::IValue> DecodeValue(const proto::Value& value,
                                        const std::vector<at::Tensor>& tensors,
                                        const CodecLimits& limits = {},
                                        Peer peer = {});

// The bytes tensor `index` of a message takes by its metadata, after checking
// that the metadata is one this codec accepts and fits the limits.
absl::StatusOr<uint64_t> TensorBytes(const proto::TensorMeta& meta, size_t index,
                                     const CodecLimits& limits = {});

// Validates the envelope's tensor metadata against the byte lengths the
// transport announced for each tensor payload, then allocates the receive
// buffers (from `pool` when given). Nothing is allocated unless every check
// passes.
absl::StatusOr<std::vector<at::Tensor>> AllocateTensors(
    const proto::Envelope& envelope,
    const std::vector<size_t>& payload_lengths,
    const CodecLimits& limits = {}, BufferPool* pool = nullptr);

// The envelope serialized with every tensor's bytes in its tensor_bytes
// field, for a frame that carries no other tensor data (the tensors must be
// contiguous and CPU, as EncodeValue leaves them).
std::string SerializeEnvelopeWithTensors(const proto::Envelope& envelope,
                                         const std::vector<at::Tensor>& tensors);

// The tensors of an envelope that carries them in tensor_bytes: validates
// the metadata as AllocateTensors does and checks that the bytes are exactly
// what it describes, then copies them out and clears the field.
absl::StatusOr<std::vector<at::Tensor>> TakeTensorsFromEnvelope(proto::Envelope* envelope,
                                                                const CodecLimits& limits = {});

// Parses a serialized envelope, enforcing the size limit.
absl::StatusOr<proto::Envelope> ParseEnvelope(const std::string& bytes,
                                              const CodecLimits& limits = {});

}  // namespace tessera::rpc
