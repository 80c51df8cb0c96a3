// The TensorPipe agent's wire, attacked with real processes: garbage on
// the listening port, authenticated peers sending frames that lie, replayed
// handshakes, and a listener that cannot prove the job secret. (The gRPC
// agent's counterparts: grpc_external_client_test, grpc_impostor_test.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <tensorpipe/tensorpipe.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rpc/auth/handshake.h"
#include "rpc/init.h"
#include "store/store_client.h"
#include "tests/testing/raw_tensorpipe_peer.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

class TensorPipeWireTest : public RpcWorld {
 protected:
  // worker0, here, in a world whose "worker1" is `impostor` (listening).
  std::unique_ptr<rpc::Runtime> StartFacing(RawTensorPipePeer& impostor) {
    auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
    if (!store.ok()) {
      ADD_FAILURE() << store.status();
      return nullptr;
    }
    store_ = *std::move(store);
    const std::string address = impostor.Listen();
    store::StoreClient registrar("127.0.0.1", store_port(), absl::Seconds(10), TestJobSecret());
    if (auto set = registrar.Set("tessera/workers/1", absl::StrCat("worker1\n", address, "\n"));
        !set.ok()) {
      ADD_FAILURE() << set;
      return nullptr;
    }
    rpc::RpcOptions options = InProcessOptions("worker0", 0, 2, store_port());
    options.backend = rpc::Backend::kTensorPipe;
    auto runtime = rpc::TryInit(options, MakeTestRegistry());
    if (!runtime.ok()) {
      ADD_FAILURE() << runtime.status();
      return nullptr;
    }
    return *std::move(runtime);
  }
};

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
TEST_F(TensorPipeWireTest, GarbageOnTheListeningPortLeavesTheWorkerServing) {
  StartWorld(2);
  auto [host, port] = ListenerOf(rt(), 1);
  SendRawBytes(host, port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  SendRawBytes(host, port, std::string("\x00\x00\x00\x40\x00\x00\x00\x00", 8));  // 1 GiB
  SendRawBytes(host, port, std::string("\x10\x00\x00\x00\x00\x00\x00\x00garbage", 15));
  SendRawBytes(host, port, std::string(3, '\xff'));  // truncated length prefix
  SendRawBytes(host, port, std::string("\x04\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", 12));
  // Zeros: a zero-length first frame killed the worker with SIGSEGV before
  // the transport gate (see Note [Transport gate], see Note [Bounded nop reads]).
  for (size_t zeros : {1, 8, 16, 40, 100, 10000}) SendRawBytes(host, port, std::string(zeros, '\0'));
  // A greeting with the right magic but no proof of the secret after it.
  SendRawBytes(host, port, std::string("TSRGATE1") + std::string(32, 'n') + std::string(32, 'p'));
  // None of it reaches TensorPipe's listener (see Note [Hello gate]), so a new
  // peer connects at once — here worker0's first call to worker1.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{11}), 11);
}

// An authenticated TensorPipe peer (past the transport's framing and the
// handshake) sends envelopes that lie. Each is rejected by Tessera's
// decoder: the connection closes with a logged reason, nothing is allocated
// for the lie, and the worker serves on.
TEST_F(TensorPipeWireTest, MalformedFramesCloseOnlyThatConnection) {
  StartWorld(2);
  namespace tp = tensorpipe;
  RawTensorPipePeer peer(TestJobSecret());
  const rpc::PeerIdentity self{"worker0", 0};
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
      {"tensor bigger than its bytes", envelope_with([](proto::Envelope& e) {
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
      // See Note [Small tensors ride in the envelope]: the bytes must be exactly
      // what the metadata describes, within the bound, and alone.
      {"tensor bytes short of their metadata", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(4);
         e.set_tensor_bytes(std::string(12, 'x'));
       }),
       false},
      {"tensor bytes beyond their metadata", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(1);
         e.set_tensor_bytes(std::string(8, 'x'));
       }),
       false},
      {"tensor bytes over the envelope's bound", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(1 << 16);
         e.set_tensor_bytes(std::string(4 << 16, 'x'));
       }),
       false},
      {"tensor bytes and a tensor", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(4);
         e.set_tensor_bytes(std::string(16, 'x'));
       }),
       true},
      // See Note [Tensors in shared memory]: a handle's descriptor must have been
      // posted to the worker's inbox, and the handle must be well formed.
      {"a tensor in shared memory under a ticket never posted",
       envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(4);
         meta->mutable_shared()->set_ticket(12345);
         meta->mutable_shared()->set_segment(std::string(16, 'x'));
         meta->mutable_shared()->set_segment_bytes(16);
       }),
       false},
      {"a shared-memory segment id of 3 bytes", envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(4);
         meta->mutable_shared()->set_segment("abc");
       }),
       false},
      {"a tensor in shared memory beside envelope tensor bytes",
       envelope_with([](proto::Envelope& e) {
         auto* meta = e.add_tensors();
         meta->set_dtype(static_cast<int>(c10::ScalarType::Float));
         meta->add_sizes(4);
         meta->mutable_shared()->set_ticket(1);
         e.set_tensor_bytes(std::string(16, 'x'));
       }),
       false},
      {"response on a request pipe",
       envelope_with([](proto::Envelope& e) { e.set_kind(proto::RESPONSE); }), false},
  };
  for (const auto& c : cases) {
    auto pipe = peer.Connect(rt().workers()[1].address);
    ASSERT_TRUE(RawTensorPipePeer::Authenticate(pipe, TestJobSecret(), self).ok()) << c.name;
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
    auto pipe = peer.Connect(rt().workers()[1].address);
    ASSERT_TRUE(RawTensorPipePeer::Authenticate(pipe, TestJobSecret(), self).ok());
    rpc::Message request = CallEnvelope("echo", 7);
    request.envelope.add_args()->set_tensor_index(3);
    ASSERT_TRUE(RawTensorPipePeer::Write(pipe, std::move(request)).ok());
    auto reply = RawTensorPipePeer::Read(pipe);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->envelope.request_id(), 7u);
    EXPECT_EQ(reply->envelope.status().code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_NE(reply->envelope.status().message().find("tensor index 3"), std::string::npos);
    pipe->close();
  }
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{12}), 12);
}

// A peer that recorded a valid handshake replays it on a new connection:
// the worker's fresh challenge does not match the old proof, so it is
// refused and its request is never served; a peer without the secret is
// refused too. The worker serves on.
TEST_F(TensorPipeWireTest, ReplayedHandshakeAndMissingSecretAreRefused) {
  StartWorld(2);
  RawTensorPipePeer peer(TestJobSecret());  // past the transport gate: a job member
  const std::string address = rt().workers()[1].address;
  const rpc::PeerIdentity self{"worker0", 0};

  // The recording: a legitimate handshake.
  rpc::ClientHandshake recorded(TestJobSecret(), self);
  rpc::Message hello;
  hello.envelope = recorded.Hello();
  auto first = peer.Connect(address);
  ASSERT_TRUE(RawTensorPipePeer::Write(first, hello).ok());
  auto challenge = RawTensorPipePeer::Read(first);
  ASSERT_TRUE(challenge.ok()) << challenge.status();
  auto proof = recorded.OnChallenge(challenge->envelope);
  ASSERT_TRUE(proof.ok()) << proof.status();
  rpc::Message proof_message;
  proof_message.envelope = *proof;
  ASSERT_TRUE(RawTensorPipePeer::Write(first, proof_message).ok());
  auto accepted = RawTensorPipePeer::Read(first);
  ASSERT_TRUE(accepted.ok());
  EXPECT_TRUE(recorded.OnResult(accepted->envelope).ok());
  first->close();

  // The replay: same hello, same proof, then a request.
  auto replay = peer.Connect(address);
  ASSERT_TRUE(RawTensorPipePeer::Write(replay, hello).ok());
  ASSERT_TRUE(RawTensorPipePeer::Read(replay).ok());  // a new challenge
  ASSERT_TRUE(RawTensorPipePeer::Write(replay, proof_message).ok());
  rpc::Message block = CallEnvelope("block", 1);
  block.envelope.add_args()->set_string_value("replayed");
  RawTensorPipePeer::Write(replay, block).IgnoreError();  // may find the pipe closed
  auto verdict = RawTensorPipePeer::Read(replay);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_EQ(verdict->envelope.status().code(),
            static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_NE(verdict->envelope.status().message().find("job secret"), std::string::npos);
  EXPECT_FALSE(RawTensorPipePeer::Read(replay).ok()) << "connection left open";

  // No secret at all: the transport gate refuses it before TensorPipe.
  RawTensorPipePeer outsider;
  auto stranger = outsider.Connect(address);
  auto refused = RawTensorPipePeer::Authenticate(stranger, auth::JobSecret(), self);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("did not prove the job secret"), std::string::npos) << refused;

  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{3}), 3);
  // The replayed request never ran ("block" marks its start in the store).
  EXPECT_FALSE(rt().store().Get("replayed/started", absl::ZeroDuration()).ok());
}

// The other direction: the address a worker learned for "worker1" leads to
// a process without the job secret (in a real job: someone who took over a
// dead worker's port, or a redirected connection). The caller's half of the
// transport gate refuses it: the call fails as Unauthenticated naming the
// peer, and the impostor never gets a pipe, let alone the request.
TEST_F(TensorPipeWireTest, WorkerRefusesAListenerThatCannotProveTheSecret) {
  RawTensorPipePeer impostor(auth::JobSecret("a guess at the secret"));
  auto runtime = StartFacing(impostor);
  ASSERT_NE(runtime, nullptr);

  auto result = runtime->RpcAsync<int64_t>("worker1", "echo", int64_t{5}).Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << result.status();
  EXPECT_NE(result.status().message().find("worker1"), std::string::npos) << result.status();
  EXPECT_FALSE(impostor.Accept(absl::Seconds(1)).ok()) << "the impostor got a pipe";
  EXPECT_TRUE(runtime->TryShutdown(/*graceful=*/false).ok());
}

// Past the transport gate (a process holding the secret but not a worker's
// agent), the agent's own handshake still checks the listener's proof.
TEST_F(TensorPipeWireTest, WorkerRefusesAPeerThatCannotProveTheSecret) {
  RawTensorPipePeer impostor(TestJobSecret());
  auto runtime = StartFacing(impostor);
  ASSERT_NE(runtime, nullptr);

  auto call = runtime->RpcAsync<int64_t>("worker1", "echo", int64_t{5});
  auto pipe = impostor.Accept();
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto hello = RawTensorPipePeer::Read(*pipe);
  ASSERT_TRUE(hello.ok()) << hello.status();
  rpc::ServerHandshake pretender(auth::JobSecret("a guess at the secret"));
  auto challenge = pretender.OnHello(hello->envelope);
  ASSERT_TRUE(challenge.ok()) << challenge.status();
  rpc::Message challenge_message;
  challenge_message.envelope = *challenge;
  ASSERT_TRUE(RawTensorPipePeer::Write(*pipe, challenge_message).ok());

  auto result = call.Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << result.status();
  EXPECT_NE(result.status().message().find("worker1"), std::string::npos) << result.status();
  auto next = RawTensorPipePeer::Read(*pipe);
  EXPECT_FALSE(next.ok()) << "the impostor received envelope kind "
                          << next->envelope.kind();
  EXPECT_TRUE(runtime->TryShutdown(/*graceful=*/false).ok());
}

}  // namespace
}  // namespace tessera::testing
