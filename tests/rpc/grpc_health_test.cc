// The hand-encoded grpc.health.v1 messages (rpc/grpc/health.h), byte for
// byte; the Python client test checks the same service over the wire.
#include "rpc/grpc/health.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::rpc {
namespace {

grpc::ByteBuffer Bytes(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// HealthCheckRequest{service} as protobuf encodes it.
std::string Request(const std::string& service) {
  std::string bytes = "\x0a";
  size_t length = service.size();
  do {
    bytes.push_back(static_cast<char>((length & 0x7f) | (length > 0x7f ? 0x80 : 0)));
    length >>= 7;
  } while (length != 0);
  return bytes + service;
}

TEST(GrpcHealthTest, KnowsItsMethods) {
  EXPECT_EQ(HealthMethodOf("/grpc.health.v1.Health/Check"), HealthMethod::kCheck);
  EXPECT_EQ(HealthMethodOf("/grpc.health.v1.Health/Watch"), HealthMethod::kWatch);
  EXPECT_EQ(HealthMethodOf("/tessera.proto.Worker/Exchange"), HealthMethod::kNone);
}

TEST(GrpcHealthTest, AnswersServingOrNotServingForTheWorkersServices) {
  for (const std::string& request : {std::string(), Request(""), Request("tessera.proto.Worker")}) {
    auto serving = HealthResponse(Bytes(request), true);
    ASSERT_TRUE(serving.ok()) << serving.status();
    EXPECT_EQ(Flatten(*serving), std::string("\x08\x01", 2));
    auto not_serving = HealthResponse(Bytes(request), false);
    ASSERT_TRUE(not_serving.ok()) << not_serving.status();
    EXPECT_EQ(Flatten(*not_serving), std::string("\x08\x02", 2));
  }
}

TEST(GrpcHealthTest, UnknownServiceIsNotFound) {
  // A name longer than 127 bytes takes a two-byte length.
  for (const std::string& name : {std::string("no.such.Service"), std::string(300, 'x')}) {
    auto response = HealthResponse(Bytes(Request(name)), true);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound) << name.size();
  }
}

TEST(GrpcHealthTest, MalformedRequestsAreRejected) {
  for (const std::string& bytes :
       {std::string("\x12\x00", 2), std::string("\x0a", 1), std::string("\x0a\x05" "ab", 4),
        std::string("\x0a\x01" "ab", 4), std::string("\x0a\xff\xff\xff\xff\xff\xff", 7)}) {
    EXPECT_EQ(HealthResponse(Bytes(bytes), true).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tessera::rpc
