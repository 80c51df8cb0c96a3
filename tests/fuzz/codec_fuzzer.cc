// libFuzzer target for everything Tessera decodes from a peer: the envelope,
// the tensor metadata checked against transport lengths or against the
// tensor bytes the envelope carries, and the values.
//
// Input layout: [n: 1 byte][n x 4-byte little-endian tensor lengths][envelope].
// The lengths play the transport descriptor, so the fuzzer can make metadata
// and payload disagree. Any crash, sanitizer report or oversized allocation
// is a bug; errors are the expected outcome for almost every input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::rpc;
  if (size < 1) return 0;
  const size_t count = data[0] % 8;
  if (size < 1 + 4 * count) return 0;
  std::vector<size_t> lengths;
  for (size_t i = 0; i < count; ++i) {
    uint32_t length = 0;
    std::memcpy(&length, data + 1 + 4 * i, 4);
    lengths.push_back(length);
  }
  const size_t offset = 1 + 4 * count;
  const std::string bytes(reinterpret_cast<const char*>(data + offset), size - offset);

  CodecLimits limits;
  limits.max_tensor_bytes = 1 << 20;  // keep the fuzzer's memory small
  auto envelope = ParseEnvelope(bytes, limits);
  if (!envelope.ok()) return 0;
  // Tensors inside the envelope (see Note [Small tensors ride in the
  // envelope]), else sized by the transport's lengths.
  auto tensors = envelope->has_tensor_bytes()
                     ? TakeTensorsFromEnvelope(&*envelope, limits)
                     : AllocateTensors(*envelope, lengths, limits);
  if (!tensors.ok()) return 0;
  for (const auto& arg : envelope->args()) (void)DecodeValue(arg, *tensors, limits);
  if (envelope->has_result()) (void)DecodeValue(envelope->result(), *tensors, limits);
  return 0;
}
