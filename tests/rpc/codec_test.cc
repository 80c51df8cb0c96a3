#include "rpc/codec.h"

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include "rpc/value_traits.h"

namespace tessera::rpc {
namespace {

c10::IValue RoundTrip(const c10::IValue& value) {
  Message message;
  proto::Value wire;
  EXPECT_TRUE(EncodeValue(value, &wire, &message).ok());
  std::vector<size_t> lengths;
  for (const auto& t : message.tensors) lengths.push_back(t.nbytes());
  auto received = AllocateTensors(message.envelope, lengths);
  EXPECT_TRUE(received.ok()) << received.status();
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::memcpy((*received)[i].data_ptr(), message.tensors[i].data_ptr(), lengths[i]);
  }
  return *DecodeValue(wire, *received);
}

TEST(CodecTest, PlainValuesRoundTrip) {
  EXPECT_TRUE(RoundTrip(c10::IValue()).isNone());
  EXPECT_EQ(RoundTrip(c10::IValue(true)).toBool(), true);
  EXPECT_EQ(RoundTrip(c10::IValue(int64_t{-7})).toInt(), -7);
  EXPECT_EQ(RoundTrip(c10::IValue(2.5)).toDouble(), 2.5);
  EXPECT_EQ(RoundTrip(c10::IValue(std::string("a\0b", 3))).toStringRef(), std::string("a\0b", 3));
  auto list = RoundTrip(ToIValue(std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(list.isIntList());
  EXPECT_EQ(*ValueTraits<std::vector<int64_t>>::FromIValue(list), (std::vector<int64_t>{1, 2, 3}));
  auto dict = RoundTrip(ToIValue(std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_EQ((*ValueTraits<std::map<std::string, std::string>>::FromIValue(dict)).at("k"), "v");
}

TEST(CodecTest, AViewSendsOnlyItsOwnElements) {
  at::Tensor base = at::arange(1000, at::kFloat).reshape({100, 10});
  Message message;
  proto::Value wire;
  ASSERT_TRUE(EncodeValue(c10::IValue(base.narrow(0, 10, 2)), &wire, &message).ok());
  ASSERT_EQ(message.tensors.size(), 1u);
  EXPECT_EQ(message.tensors[0].nbytes(), 2u * 10 * sizeof(float));
  // A contiguous view is not copied: it points into the original storage.
  EXPECT_EQ(message.tensors[0].data_ptr(), base.narrow(0, 10, 2).data_ptr());
  Message transposed;
  ASSERT_TRUE(EncodeValue(c10::IValue(base.t()), &wire, &transposed).ok());
  EXPECT_TRUE(transposed.tensors[0].is_contiguous());
  EXPECT_TRUE(at::equal(RoundTrip(c10::IValue(base.t())).toTensor(), base.t()));
}

TEST(CodecTest, UnsupportedValuesAreErrorsNotCrashes) {
  Message message;
  proto::Value wire;
  c10::impl::GenericDict int_keys(c10::IntType::get(), c10::IntType::get());
  int_keys.insert(c10::IValue(1), c10::IValue(2));
  auto status = EncodeValue(c10::IValue(int_keys), &wire, &message);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("string keys"), std::string::npos);
}

TEST(CodecTest, DepthLimitStopsDeepNesting) {
  proto::Value deep;
  proto::Value* cursor = &deep;
  for (int i = 0; i < 100; ++i) cursor = cursor->mutable_list()->add_items();
  cursor->set_int_value(1);
  EXPECT_EQ(DecodeValue(deep, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

proto::Envelope OneTensor(int dtype, std::vector<int64_t> sizes) {
  proto::Envelope envelope;
  auto* meta = envelope.add_tensors();
  meta->set_dtype(dtype);
  for (auto s : sizes) meta->add_sizes(s);
  return envelope;
}

TEST(CodecTest, AllocationIsBoundedByWhatTheFrameProves) {
  const int kFloat = static_cast<int>(c10::ScalarType::Float);
  // Metadata and payload disagree.
  EXPECT_FALSE(AllocateTensors(OneTensor(kFloat, {1000}), {16}).ok());
  // Count mismatch.
  EXPECT_FALSE(AllocateTensors(OneTensor(kFloat, {4}), {}).ok());
  // Negative size, bad dtype.
  EXPECT_FALSE(AllocateTensors(OneTensor(kFloat, {-4}), {16}).ok());
  EXPECT_FALSE(AllocateTensors(OneTensor(977, {4}), {16}).ok());
  // Product overflow must not wrap around into a small allocation.
  const int64_t huge = int64_t{1} << 40;
  auto overflow = AllocateTensors(OneTensor(kFloat, {huge, huge, 0x10}), {0});
  EXPECT_FALSE(overflow.ok());
  // Above the configured limit even when consistent.
  CodecLimits small;
  small.max_tensor_bytes = 64;
  EXPECT_FALSE(AllocateTensors(OneTensor(kFloat, {32}), {128}, small).ok());
  auto ok = AllocateTensors(OneTensor(kFloat, {2, 2}), {16});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[0].sizes(), (std::vector<int64_t>{2, 2}));
}

// See Note [Small tensors ride in the envelope] (rpc/tensorpipe/frame_io.cc).
TEST(CodecTest, TensorsRideInTheEnvelopeAndBackOut) {
  Message message;
  proto::Value wire;
  const at::Tensor first = at::arange(6, at::kFloat).reshape({2, 3});
  const at::Tensor second = at::arange(3, at::kLong);
  ASSERT_TRUE(EncodeValue(ToIValue(std::vector<at::Tensor>{first, second}), &wire, &message).ok());
  auto parsed = ParseEnvelope(SerializeEnvelopeWithTensors(message.envelope, message.tensors));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensor_bytes().size(), first.nbytes() + second.nbytes());
  auto tensors = TakeTensorsFromEnvelope(&*parsed);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_FALSE(parsed->has_tensor_bytes());
  auto decoded = DecodeValue(wire, *tensors);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto list = decoded->toTensorList();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(at::equal(list[0], first));
  EXPECT_TRUE(at::equal(list[1], second));
  // An empty tensor still rides in the envelope: its zero bytes are there.
  Message empty;
  ASSERT_TRUE(EncodeValue(ToIValue(at::arange(0, at::kFloat)), &wire, &empty).ok());
  auto with_empty = ParseEnvelope(SerializeEnvelopeWithTensors(empty.envelope, empty.tensors));
  ASSERT_TRUE(with_empty.ok() && with_empty->has_tensor_bytes());
  auto none = TakeTensorsFromEnvelope(&*with_empty);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ((*none)[0].numel(), 0);
  // Without tensors the envelope serializes as it always did.
  proto::Envelope plain;
  plain.set_target("f");
  EXPECT_EQ(SerializeEnvelopeWithTensors(plain, {}), plain.SerializeAsString());
}

TEST(CodecTest, EnvelopeTensorBytesMustMatchTheirMetadata) {
  const int kFloat = static_cast<int>(c10::ScalarType::Float);
  for (size_t bytes : {0, 12, 20}) {
    proto::Envelope envelope = OneTensor(kFloat, {4});
    envelope.set_tensor_bytes(std::string(bytes, 'x'));
    auto tensors = TakeTensorsFromEnvelope(&envelope);
    EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument) << bytes;
  }
  // A huge shape is refused before anything is allocated for it.
  proto::Envelope huge = OneTensor(kFloat, {int64_t{1} << 40, int64_t{1} << 40});
  huge.set_tensor_bytes("abcd");
  EXPECT_EQ(TakeTensorsFromEnvelope(&huge).status().code(), absl::StatusCode::kInvalidArgument);
  proto::Envelope exact = OneTensor(kFloat, {1});
  exact.set_tensor_bytes(std::string(4, '\0'));
  auto one = TakeTensorsFromEnvelope(&exact);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)[0].item<float>(), 0.0f);
}

TEST(CodecTest, MalformedEnvelopeIsRejected) {
  EXPECT_FALSE(ParseEnvelope(std::string("\xff\xff\xff", 3)).ok());
  CodecLimits tiny;
  tiny.max_envelope_bytes = 2;
  EXPECT_FALSE(ParseEnvelope("abcd", tiny).ok());
}

TEST(CodecTest, TensorIndexOutOfRangeIsAnError) {
  proto::Value value;
  value.set_tensor_index(2);
  auto decoded = DecodeValue(value, {});
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::rpc
