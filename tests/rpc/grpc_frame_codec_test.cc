// The gRPC agent's frames (rpc/grpc/frame_codec.h) without a network: what
// one side encodes the other decodes, and an envelope in TensorPipe's
// small-tensor form is refused rather than half-read.
#include "rpc/grpc/frame_codec.h"

#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include "rpc/value_traits.h"

namespace tessera::rpc {
namespace {

TEST(GrpcFrameCodecTest, AMessageWithTensorsRoundTrips) {
  Message message;
  message.envelope.set_target("echo");
  const at::Tensor tensor = at::arange(6, at::kFloat);
  ASSERT_TRUE(EncodeValue(ToIValue(tensor), message.envelope.add_args(), &message).ok());
  auto frame = EncodeFrame(message, size_t{1} << 20);
  ASSERT_TRUE(frame.ok()) << frame.status();
  auto decoded = DecodeFrame(*frame, CodecLimits(), nullptr);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->envelope.target(), "echo");
  ASSERT_EQ(decoded->tensors.size(), 1u);
  EXPECT_TRUE(at::equal(decoded->tensors[0], tensor));
}

// See Note [Small tensors ride in the envelope] is TensorPipe's; here tensors
// are frame fields, and bytes in the envelope would be silently held.
TEST(GrpcFrameCodecTest, TensorBytesInTheEnvelopeAreRefused) {
  proto::Envelope envelope;
  envelope.set_target("echo");
  auto* meta = envelope.add_tensors();
  meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
  meta->add_sizes(1);
  envelope.set_tensor_bytes(std::string(4, '\0'));
  auto decoded = DecodeFrame(EncodeEnvelopeFrame(envelope), CodecLimits(), nullptr);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("tensor bytes"), std::string::npos) << decoded.status();
}

}  // namespace
}  // namespace tessera::rpc
