// The guarded transports refuse what TensorPipe's uv transport trusts, over
// TCP and over abstract Unix sockets alike. Both ends here are the transport
// itself; the "peer" misbehaves by writing frames that do not match what the
// other side reads.
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/future.h"
#include "rpc/tensorpipe/guarded_tcp/connect_retry.h"
#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"
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

// See Note [Read ahead]: a burst that is all in the socket before anything
// reads it arrives frame by frame, in order, whole — small frames several to
// a receive, and a frame larger than the read-ahead partly from it and the
// rest straight into its buffer. Each read is posted from here once the
// last one finished; the 30 frames after the large one all land in the
// read-ahead at once, and the socket is then empty, so no readiness event
// comes for them: past its budget of 8 (see Note [Fair reads]) the connection
// must come back for them by itself. (Small enough for the socket buffers
// to hold it all, Unix sockets counting some 1 KiB per send.)
TEST_P(GuardedTcpTest, AFrameBurstIsReadInOrderWhateverTheFrameSizes) {
  // Shared with the writes' callbacks: the bytes live until each is sent.
  auto frames = std::make_shared<std::vector<std::string>>();
  for (int i = 0; i < 60; ++i) frames->push_back(std::string(1 + i % 97, static_cast<char>(i)));
  frames->push_back(std::string(20 << 10, 'L'));
  for (int i = 0; i < 30; ++i) frames->push_back(std::string(5 + i, static_cast<char>(i + 7)));
  auto read_next = [this] {
    Promise<std::string> got;
    server_->read([got](const tp::Error& e, const void* data, size_t length) {
      got.Set(e ? absl::UnavailableError(e.what())
                : absl::StatusOr<std::string>(std::string(static_cast<const char*>(data), length)));
    });
    return got.GetFuture();
  };
  // The first read waits before anything is written, so the burst's first
  // bytes come as a readiness event, and the read budget (see Note [Fair reads])
  // counts from there.
  auto first = read_next();
  auto written = std::make_shared<std::atomic<size_t>>(0);
  Promise<bool> all_written;
  for (const std::string& frame : *frames) {
    client_->write(frame.data(), frame.size(), [frames, written, all_written](const tp::Error& e) {
      if (e || ++*written == frames->size()) all_written.Set(!e);
    });
  }
  ASSERT_TRUE(*all_written.GetFuture().Wait(absl::Seconds(10)));
  for (size_t i = 0; i < frames->size(); ++i) {
    auto frame = (i == 0 ? first : read_next()).Wait(absl::Seconds(10));
    ASSERT_TRUE(frame.ok()) << "frame " << i << ": " << frame.status();
    ASSERT_EQ(*frame, (*frames)[i]) << "frame " << i;
  }
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

// See Note [Connect again]: the retry schedule, on a clock of the test's own.
TEST(ConnectRetryTest, DelaysGrowWithJitterAndStopAtTheBudget) {
  using guarded_tcp::ConnectRetry;
  ConnectRetry retry(absl::Seconds(10), absl::Milliseconds(2), absl::Milliseconds(250));
  absl::Time now = absl::UnixEpoch();
  absl::Duration nominal = absl::Milliseconds(2);
  int attempts = 0;
  for (;;) {
    retry.Attempted(now);
    ++attempts;
    const auto delay = retry.NextDelay(now);
    if (!delay.has_value()) break;
    EXPECT_GE(*delay, nominal * 0.5);
    EXPECT_LE(*delay, nominal * 1.5);
    nominal = std::min(nominal * 2, absl::Milliseconds(250));
    now += *delay;
  }
  // About 10 s of attempts at most 375 ms apart: dozens, not thousands.
  EXPECT_GE(now - absl::UnixEpoch(), absl::Seconds(9));
  EXPECT_LE(now - absl::UnixEpoch(), absl::Seconds(10));
  EXPECT_GT(attempts, 20);
  EXPECT_LT(attempts, 120);
  EXPECT_EQ(retry.attempts(), attempts);
  EXPECT_NE(retry.Describe(now).find(absl::StrCat(attempts, " attempts over")), std::string::npos)
      << retry.Describe(now);
  EXPECT_TRUE(guarded_tcp::IsBusyListener(EAGAIN));
  EXPECT_FALSE(guarded_tcp::IsBusyListener(ECONNREFUSED));  // nothing listens: a dead worker
}

// A listening socket of the test's own at a fresh address of `family`: it
// plays the far end by hand — closing connections unanswered, as a full
// gate closes its longest-waiting one (see Note [Full gate]), or answering the
// gate as the transport's listener would.
class HandMadeListener {
 public:
  explicit HandMadeListener(Family family) {
    if (family == Family::kUnix) {
      fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const std::string name = FreshAddress(family).substr(1);  // after the '@'
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path + 1, name.data(), name.size());
      const socklen_t length = offsetof(sockaddr_un, sun_path) + 1 + name.size();
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), length), 0) << errno;
      address_ = "@" + name;
    } else {
      fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << errno;
      socklen_t length = sizeof(address);
      getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
      address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
    }
    EXPECT_EQ(listen(fd_, 16), 0) << errno;
  }
  ~HandMadeListener() { close(fd_); }
  const std::string& address() const { return address_; }

  // The next connection (-1 after `timeout` without one); reads on it time
  // out after 10 s.
  int Accept(absl::Duration timeout = absl::Seconds(10)) {
    pollfd ready{fd_, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return -1;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    timeval ten_seconds{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &ten_seconds, sizeof(ten_seconds));
    return fd;
  }

 private:
  int fd_ = -1;
  std::string address_;
};

std::string ReceiveExactly(int fd, size_t bytes) {
  std::string data(bytes, '\0');
  const ssize_t n = recv(fd, data.data(), bytes, MSG_WAITALL);
  return n == static_cast<ssize_t>(bytes) ? data : std::string();
}

class ConnectAgainTest : public ::testing::TestWithParam<Family> {};

TEST_P(ConnectAgainTest, AConnectionClosedBeforeTheChallengeDialsAgainUnnoticed) {
  GuardedTcpOptions options;
  options.secret = auth::JobSecret("connect again");
  auto context = MakeTransport(GetParam(), options);
  HandMadeListener listener(GetParam());
  auto client = context->connect(listener.address());
  static const char four[4] = {1, 2, 3, 4};
  Promise<std::string> written;
  client->write(four, sizeof(four), [written](const tp::Error& e) {
    written.Set(e ? e.what() : std::string());
  });
  // The first connection is closed before any challenge: the gate had no room.
  const int first = listener.Accept();
  ASSERT_GE(first, 0);
  EXPECT_EQ(ReceiveExactly(first, guarded_tcp::kGreetingBytes).size(),
            guarded_tcp::kGreetingBytes);
  close(first);
  // The next is answered as the transport's listener would.
  const int second = listener.Accept();
  ASSERT_GE(second, 0) << "the connecting side did not dial again";
  guarded_tcp::GateServer gate(options.secret);
  auto challenge = gate.OnGreeting(ReceiveExactly(second, guarded_tcp::kGreetingBytes));
  ASSERT_TRUE(challenge.ok()) << challenge.status();
  ASSERT_EQ(send(second, challenge->data(), challenge->size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(challenge->size()));
  EXPECT_TRUE(gate.OnProof(ReceiveExactly(second, guarded_tcp::kProofBytes)).ok());
  // Then TensorPipe's frame, whole and once: nothing of it went to the
  // first connection.
  const std::string frame = ReceiveExactly(second, sizeof(uint64_t) + sizeof(four));
  ASSERT_EQ(frame.size(), sizeof(uint64_t) + sizeof(four));
  EXPECT_EQ(frame[0], 4);
  EXPECT_EQ(frame.substr(sizeof(uint64_t)), std::string(four, sizeof(four)));
  EXPECT_EQ(*written.GetFuture().Wait(absl::Seconds(10)), "");
  close(second);
  context->close();
  context->join();
}

TEST(ConnectAgainUnixTest, GivesUpAfterItsBudgetNamingTheCauseAndTheAttempts) {
  // The transport's budget (the agent's handshake timeout: 60 s by default).
  GuardedTcpOptions options;
  options.connect_budget = absl::Seconds(4);
  auto context = CreateGuardedUnixTransport(options);
  HandMadeListener listener(Family::kUnix);
  auto client = context->connect(listener.address());
  Promise<std::string> written;
  static const char one[1] = {1};
  client->write(one, sizeof(one), [written](const tp::Error& e) {
    written.Set(e ? e.what() : std::string());
  });
  // Every attempt is closed unanswered, until the connecting side stops
  // (its write fails) or 20 s pass.
  int closed = 0;
  auto failed = written.GetFuture();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!failed.Wait(absl::ZeroDuration()).ok() && absl::Now() < give_up) {
    if (const int fd = listener.Accept(absl::Milliseconds(100)); fd >= 0) {
      close(fd);
      ++closed;
    }
  }
  EXPECT_GT(closed, 10);
  auto error = failed.Wait(absl::ZeroDuration());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_NE(error->find("cannot connect to " + listener.address()), std::string::npos) << *error;
  // The listener's close, as the connecting side last saw it.
  EXPECT_TRUE(error->find("closed before the transport gate's challenge") != std::string::npos ||
              error->find("Broken pipe") != std::string::npos ||
              error->find("Connection reset") != std::string::npos)
      << *error;
  EXPECT_NE(error->find(absl::StrCat("gave up after ", closed, " attempts over ")),
            std::string::npos)
      << *error;
  context->close();
  context->join();
}

INSTANTIATE_TEST_SUITE_P(Families, ConnectAgainTest, ::testing::Values(Family::kTcp, Family::kUnix),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return info.param == Family::kTcp ? "tcp" : "unix";
                         });

INSTANTIATE_TEST_SUITE_P(Families, GuardedTcpTest, ::testing::Values(Family::kTcp, Family::kUnix),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return info.param == Family::kTcp ? "tcp" : "unix";
                         });

}  // namespace
}  // namespace tessera::rpc
