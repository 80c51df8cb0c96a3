// Fault tests with real processes: dead peers, timeouts, shutdown, and
// hostile bytes on the listening port.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>

#include <thread>

#include <tensorpipe/tensorpipe.h>

#include "absl/strings/numbers.h"
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rpc::CallOptions;

class RpcFaultsTest : public RpcWorld {};

// Scenario: worker2 is killed while worker0 waits on a call to it. The
// pending call fails with Unavailable long before its 120 s deadline, and
// worker1 keeps serving.
TEST_F(RpcFaultsTest, WorkerKilledMidCallFailsPendingCallsOnly) {
  expect_clean_exit_ = false;
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}}, absl::Seconds(5));
  auto pending = rt().RpcAsync<bool>(CallOptions{absl::Seconds(120)}, "worker2",
                                     "block", "killed-key");
  // The callee announces it is inside the call; then it dies.
  ASSERT_TRUE(rt().store().Get("killed-key/started", absl::Seconds(30)).ok());
  children_[1]->Kill();
  auto result = pending.Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("worker2"), std::string::npos);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  // New calls to the dead worker fail fast too, rather than hang.
  auto again = rt().RpcAsync<int64_t>(CallOptions{absl::Seconds(120)}, "worker2",
                                      "echo", int64_t{1})
                   .Wait(absl::Seconds(30));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();

  // Graceful shutdown cannot agree with a dead peer: it says who is missing
  // and closes anyway instead of hanging.
  auto status = rt().Shutdown();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("2"), std::string::npos) << status;
  EXPECT_EQ(children_[0]->Wait(absl::Seconds(60)), 3);  // its shutdown also failed
}

TEST(RpcRendezvousTest, MissingWorkersAreNamedNotWaitedForever) {
  auto store = store::StoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("worker0", 0, 3, (*store)->port());
  options.rendezvous_timeout = absl::Milliseconds(500);
  auto runtime = rpc::Runtime::Init(options, MakeTestRegistry());
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(runtime.status().message().find("rank(s) 1, 2"), std::string::npos)
      << runtime.status();
}

// Scenario: calls are in flight when worker0 starts a graceful shutdown;
// they are released only once the shutdown protocol has begun. Every call
// still completes successfully, then everyone exits cleanly.
TEST_F(RpcFaultsTest, GracefulShutdownWaitsForCallsInFlight) {
  StartWorld(2);
  std::vector<Future<bool>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(rt().RpcAsync<bool>("worker1", "block", "release"));
  }
  std::thread releaser([this] {
    // Rank 0's first shutdown snapshot proves the shutdown has begun.
    auto started = rt().store().Get("tessera/shutdown/0/0", absl::Seconds(30));
    EXPECT_TRUE(started.ok()) << started.status();
    EXPECT_TRUE(rt().store().Set("release", "go").ok());
  });
  auto status = rt().Shutdown();
  releaser.join();
  EXPECT_TRUE(status.ok()) << status;
  for (auto& call : calls) {
    auto result = call.Wait(absl::Seconds(1));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(*result);
  }
}

TEST_F(RpcFaultsTest, ForcedShutdownFailsPendingCalls) {
  expect_clean_exit_ = false;
  StartWorld(2, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}});
  auto pending = rt().RpcAsync<bool>("worker1", "block", "never");
  ASSERT_TRUE(rt().store().Get("never/started", absl::Seconds(30)).ok());
  EXPECT_TRUE(rt().Shutdown(/*graceful=*/false).ok());
  auto result = pending.Wait(absl::Seconds(5));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  children_[0]->Kill();
}

// Host and port of a worker's TensorPipe listener, from the rendezvous.
std::pair<std::string, int> ListenerOf(rpc::Runtime& rt, int rank) {
  const std::string url = rt.workers()[rank].address;  // tcp://host:port
  const auto colon = url.rfind(':');
  const auto scheme_end = url.find("://") + 3;
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(url.substr(colon + 1), &port)) << url;
  return {url.substr(scheme_end, colon - scheme_end), port};
}

void SendRawBytes(const std::string& host, int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << strerror(errno);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

// Garbage on the listening port: an HTTP request (whose first 8 bytes read
// as a 6e18-byte length — with TensorPipe's uv transport this aborts the
// worker, see docs/security.md), a truncated frame, a truncated length, and
// a frame that is not a valid control message. Each closes only its own
// connection; the worker keeps serving.
TEST_F(RpcFaultsTest, GarbageOnTheListeningPortLeavesTheWorkerServing) {
  StartWorld(2);
  auto [host, port] = ListenerOf(rt(), 1);
  SendRawBytes(host, port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  SendRawBytes(host, port, std::string("\x00\x00\x00\x40\x00\x00\x00\x00", 8));  // 1 GiB
  SendRawBytes(host, port, std::string("\x10\x00\x00\x00\x00\x00\x00\x00garbage", 15));
  SendRawBytes(host, port, std::string(3, '\xff'));  // truncated length prefix
  SendRawBytes(host, port, std::string("\x04\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", 12));
  // None of it reaches TensorPipe's listener (Note [Hello gate]), so a new
  // peer connects at once — here worker0's first call to worker1.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{11}), 11);
}

// A TensorPipe peer (past the transport's framing) sends envelopes that
// lie. Each is rejected by Tessera's decoder: the connection closes with a
// logged reason, nothing is allocated for the lie, and the worker serves on.
TEST_F(RpcFaultsTest, MalformedFramesCloseOnlyThatConnection) {
  StartWorld(2);
  namespace tp = tensorpipe;
  auto context = std::make_shared<tp::Context>();
  context->registerTransport(0, "tcp", rpc::CreateGuardedTcpTransport({}));
  context->registerChannel(0, "basic", tp::channel::basic::create());
  std::vector<float> four_floats(4, 1.0f);

  auto envelope_with = [](auto&& mutate) {
    proto::Envelope envelope;
    envelope.set_kind(proto::CALL);
    envelope.set_target("echo");
    mutate(envelope);
    return envelope.SerializeAsString();
  };
  struct Case {
    std::string name;
    std::string metadata;
    bool with_tensor;
  };
  std::vector<Case> cases = {
      {"garbage envelope", std::string("\xff\xff\xff\x01not a protobuf"), false},
      {"tensor bigger than its bytes",
       envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(1000000);
       }),
       true},
      {"negative size", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(-4);
       }),
       true},
      {"bad dtype", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(977);
         meta->add_sizes(4);
       }),
       true},
      {"response on a request pipe",
       envelope_with([](proto::Envelope& e) { e.set_kind(proto::RESPONSE); }), false},
  };
  for (const auto& c : cases) {
    auto pipe = context->connect(rt().workers()[1].address);
    tp::Message message;
    message.metadata = c.metadata;
    if (c.with_tensor) {
      tp::Message::Tensor tensor;
      tensor.buffer = tp::CpuBuffer{four_floats.data()};
      tensor.length = four_floats.size() * sizeof(float);
      message.tensors.push_back(std::move(tensor));
    }
    Promise<bool> closed;
    pipe->write(std::move(message), [](const tp::Error&) {});
    pipe->readDescriptor([closed](const tp::Error& error, tp::Descriptor) {
      closed.Set(static_cast<bool>(error));
    });
    auto result = closed.GetFuture().Wait(absl::Seconds(30));
    ASSERT_TRUE(result.ok()) << c.name << ": connection was not closed";
    EXPECT_TRUE(*result) << c.name << ": got a reply instead of a close";
    pipe->close();
  }
  // A well-formed envelope whose argument points at a missing tensor gets an
  // error response (the frame itself was sound).
  {
    auto pipe = context->connect(rt().workers()[1].address);
    tp::Message message;
    message.metadata = envelope_with([](proto::Envelope& e) {
      e.set_request_id(7);
      e.add_args()->set_tensor_index(3);
    });
    Promise<proto::Envelope> reply;
    pipe->write(std::move(message), [](const tp::Error&) {});
    pipe->readDescriptor([reply](const tp::Error& error, tp::Descriptor d) {
      proto::Envelope envelope;
      if (error || !envelope.ParseFromString(d.metadata)) {
        reply.Set(absl::UnavailableError("no reply"));
      } else {
        reply.Set(envelope);
      }
    });
    auto envelope = reply.GetFuture().Wait(absl::Seconds(30));
    ASSERT_TRUE(envelope.ok()) << envelope.status();
    EXPECT_EQ(envelope->request_id(), 7u);
    EXPECT_EQ(envelope->status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_NE(envelope->status().message().find("tensor index 3"), std::string::npos);
    pipe->close();
  }
  context->close();
  context->join();
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{12}), 12);
}

}  // namespace
}  // namespace tessera::testing
