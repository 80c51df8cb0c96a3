// The guarded TCP transport refuses what TensorPipe's uv transport trusts.
// Both ends here are the transport itself; the "peer" misbehaves by writing
// frames that do not match what the other side reads.
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/future.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc {
namespace {

namespace tp = tensorpipe;

class GuardedTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GuardedTcpOptions options;
    options.max_frame_bytes = 1 << 20;
    context_ = CreateGuardedTcpTransport(options);
    listener_ = context_->listen("127.0.0.1:0");
    Promise<std::shared_ptr<tp::transport::Connection>> accepted;
    listener_->accept([accepted](const tp::Error& error,
                                 std::shared_ptr<tp::transport::Connection> c) {
      if (error) {
        accepted.Set(absl::UnavailableError(error.what()));
      } else {
        accepted.Set(std::move(c));
      }
    });
    client_ = context_->connect(listener_->addr());
    // The listener hands over only connections that open with a hello.
    auto hello = std::make_shared<tp::NopHolder<tp::Packet>>();
    hello->getObject().Become(0);
    client_->write(*hello, [hello](const tp::Error&) {});
    auto server = accepted.GetFuture().Wait(absl::Seconds(10));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *server;
    auto read_hello = std::make_shared<tp::NopHolder<tp::Packet>>();
    Promise<bool> got;
    server_->read(*read_hello, [got, read_hello](const tp::Error& e) { got.Set(!e); });
    ASSERT_TRUE(*got.GetFuture().Wait(absl::Seconds(10)));
  }
  void TearDown() override {
    context_->close();
    context_->join();
  }

  // Reads into a 4-byte buffer; returns the error text ("" on success).
  std::string ReadExactly4() {
    static char buffer[4];
    Promise<std::string> result;
    server_->read(buffer, sizeof(buffer),
                  [result](const tp::Error& e, const void*, size_t) {
                    result.Set(e ? e.what() : std::string());
                  });
    return *result.GetFuture().Wait(absl::Seconds(10));
  }

  std::string ReadAny() {
    Promise<std::string> result;
    server_->read([result](const tp::Error& e, const void*, size_t) {
      result.Set(e ? e.what() : std::string());
    });
    return *result.GetFuture().Wait(absl::Seconds(10));
  }

  std::shared_ptr<tp::transport::Context> context_;
  std::shared_ptr<tp::transport::Listener> listener_;
  std::shared_ptr<tp::transport::Connection> client_;
  std::shared_ptr<tp::transport::Connection> server_;
};

TEST_F(GuardedTcpTest, MatchingFramesArrive) {
  const char four[4] = {1, 2, 3, 4};
  client_->write(four, 4, [](const tp::Error&) {});
  EXPECT_EQ(ReadExactly4(), "");
}

TEST_F(GuardedTcpTest, LongerFrameThanTheBufferIsAnErrorNotAnOverrun) {
  static const char eight[8] = {0};
  client_->write(eight, 8, [](const tp::Error&) {});
  EXPECT_NE(ReadExactly4().find("peer sent 8 bytes where 4 were expected"), std::string::npos);
}

TEST_F(GuardedTcpTest, OversizedFrameOfUnknownSizeIsRefusedBeforeAllocation) {
  static std::vector<char> big((1 << 20) + 1);
  client_->write(big.data(), big.size(), [](const tp::Error&) {});
  EXPECT_NE(ReadAny().find("the limit is 1048576"), std::string::npos);
}

TEST_F(GuardedTcpTest, UnparsableControlObjectFailsTheConnectionOnly) {
  static const char junk[4] = {'\xff', '\xff', '\xff', '\xff'};
  client_->write(junk, 4, [](const tp::Error&) {});
  auto holder = std::make_shared<tp::NopHolder<tp::Packet>>();
  Promise<std::string> result;
  server_->read(*holder, [result, holder](const tp::Error& e) {
    result.Set(e ? e.what() : std::string());
  });
  EXPECT_NE(result.GetFuture().Wait(absl::Seconds(10))->find("malformed control message"),
            std::string::npos);
  // The transport (and its listener) still work for others.
  auto other = context_->connect(listener_->addr());
  EXPECT_NE(other, nullptr);
}

}  // namespace
}  // namespace tessera::rpc
