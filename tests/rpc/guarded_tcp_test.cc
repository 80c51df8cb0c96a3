// The guarded transports refuse what TensorPipe's uv transport trusts, over
// TCP and over abstract Unix sockets alike. Both ends here are the transport
// itself; the "peer" misbehaves by writing frames that do not match what the
// other side reads.
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/future.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc {
namespace {

namespace tp = tensorpipe;

enum class Family { kTcp, kUnix };

// A listening address of `family` no other test process uses.
std::string FreshAddress(Family family) {
  static std::atomic<int> count{0};
  return family == Family::kTcp ? "127.0.0.1:0"
                                : absl::StrCat("@tessera_test_", getpid(), "_", count++);
}

std::shared_ptr<tp::transport::Context> MakeTransport(Family family,
                                                      const GuardedTcpOptions& options) {
  return family == Family::kTcp ? CreateGuardedTcpTransport(options)
                                : CreateGuardedUnixTransport(options);
}

// Dials `listener` from `context` and writes a hello frame; the connection
// is returned so that it stays open.
std::shared_ptr<tp::transport::Connection> DialAndSayHello(tp::transport::Context& context,
                                                           tp::transport::Listener& listener) {
  auto client = context.connect(listener.addr());
  auto hello = std::make_shared<tp::NopHolder<tp::Packet>>();
  hello->getObject().Become(0);
  client->write(*hello, [hello](const tp::Error&) {});
  return client;
}

class GuardedTcpTest : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    GuardedTcpOptions options;
    options.max_frame_bytes = 1 << 20;
    context_ = MakeTransport(GetParam(), options);
    listener_ = context_->listen(FreshAddress(GetParam()));
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

TEST_P(GuardedTcpTest, MatchingFramesArrive) {
  const char four[4] = {1, 2, 3, 4};
  client_->write(four, 4, [](const tp::Error&) {});
  EXPECT_EQ(ReadExactly4(), "");
}

TEST_P(GuardedTcpTest, LongerFrameThanTheBufferIsAnErrorNotAnOverrun) {
  static const char eight[8] = {0};
  client_->write(eight, 8, [](const tp::Error&) {});
  EXPECT_NE(ReadExactly4().find("peer sent 8 bytes where 4 were expected"), std::string::npos);
}

TEST_P(GuardedTcpTest, OversizedFrameOfUnknownSizeIsRefusedBeforeAllocation) {
  static std::vector<char> big((1 << 20) + 1);
  client_->write(big.data(), big.size(), [](const tp::Error&) {});
  EXPECT_NE(ReadAny().find("the limit is 1048576"), std::string::npos);
}

TEST_P(GuardedTcpTest, UnparsableControlObjectFailsTheConnectionOnly) {
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

TEST_P(GuardedTcpTest, ListensOnTheFamilyItWasMadeFor) {
  if (GetParam() == Family::kUnix) {
    EXPECT_EQ(listener_->addr().rfind("@tessera_test_", 0), 0u) << listener_->addr();
  } else {
    EXPECT_EQ(listener_->addr().rfind("127.0.0.1:", 0), 0u) << listener_->addr();
  }
  // The other family's address is refused, naming it, not misparsed.
  const std::string other = GetParam() == Family::kUnix ? "127.0.0.1:0" : "@tessera_nothing";
  auto wrong = context_->listen(other);
  Promise<std::string> result;
  wrong->accept([result](const tp::Error& e, std::shared_ptr<tp::transport::Connection>) {
    result.Set(e ? std::string(e.what()) : std::string());
  });
  EXPECT_NE(result.GetFuture().Wait(absl::Seconds(10))->find(other), std::string::npos);
}

TEST_P(GuardedTcpTest, APeerWithoutTheSecretIsRefusedAndTheListenerGoesOn) {
  GuardedTcpOptions guarded;
  guarded.secret = auth::JobSecret("the job's secret");
  auto context = MakeTransport(GetParam(), guarded);
  auto listener = context->listen(FreshAddress(GetParam()));
  Promise<std::shared_ptr<tp::transport::Connection>> accepted;
  listener->accept([accepted](const tp::Error& e, std::shared_ptr<tp::transport::Connection> c) {
    if (e) {
      accepted.Set(absl::UnavailableError(e.what()));
    } else {
      accepted.Set(std::move(c));
    }
  });
  GuardedTcpOptions stranger_options;
  stranger_options.secret = auth::JobSecret("another secret");
  auto stranger = MakeTransport(GetParam(), stranger_options);
  auto refused = DialAndSayHello(*stranger, *listener);
  Promise<std::string> refusal;
  refused->read([refusal](const tp::Error& e, const void*, size_t) {
    refusal.Set(e ? std::string(e.what()) : std::string("read a frame"));
  });
  auto why = refusal.GetFuture().Wait(absl::Seconds(10));
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_NE(why->find("secret"), std::string::npos) << *why;
  // The listener handed the stranger to no one, and takes the next peer.
  auto friendly = DialAndSayHello(*context, *listener);
  auto server = accepted.GetFuture().Wait(absl::Seconds(10));
  EXPECT_TRUE(server.ok()) << server.status();
  for (auto& c : {stranger, context}) {
    c->close();
    c->join();
  }
}

TEST(GuardedUnixTransportTest, ItsDomainIsThisBootAndNetworkNamespace) {
  const std::string domain = UnixDomainDescriptor();
  EXPECT_EQ(domain.rfind("tessera-unix:", 0), 0u) << domain;
  EXPECT_EQ(domain.find(":?"), std::string::npos) << domain;
  EXPECT_EQ(CreateGuardedUnixTransport({})->domainDescriptor(), domain);
  EXPECT_NE(CreateGuardedTcpTransport({})->domainDescriptor(), domain);
}

INSTANTIATE_TEST_SUITE_P(Families, GuardedTcpTest, ::testing::Values(Family::kTcp, Family::kUnix),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return info.param == Family::kTcp ? "tcp" : "unix";
                         });

}  // namespace
}  // namespace tessera::rpc
