// libFuzzer target for the gRPC agent's frame decoder (rpc/grpc/
// frame_codec.h), a hand-written protobuf wire reader over gRPC's slices:
// the first thing Tessera decodes of what arrives on a gRPC stream.
// Input: [slice count byte][pieces: one per slice]. Splitting the frame
// across slices exercises reads that straddle slice boundaries.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <vector>

#include "rpc/grpc/frame_codec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::rpc;
  if (size < 1) return 0;
  const size_t count = 1 + data[0] % 6;
  tessera::fuzz::Pieces pieces(data + 1, size - 1);
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i + 1 < count && !pieces.empty(); ++i) {
    std::string_view piece = pieces.Next();
    slices.emplace_back(piece.data(), piece.size());
  }
  std::string_view last = pieces.Rest();
  slices.emplace_back(last.data(), last.size());
  grpc::ByteBuffer frame(slices.data(), slices.size());
  CodecLimits limits;
  limits.max_tensor_bytes = 1 << 20;  // keep the fuzzer's memory small
  (void)DecodeFrame(frame, limits, nullptr);
  return 0;
}
