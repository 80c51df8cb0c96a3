// The caller's half of the gRPC agent's handshake, end to end: the address
// a worker learned for "worker1" leads to a gRPC server that speaks the
// Worker service but cannot prove the job secret (in a real job: someone
// who took over a dead worker's port, or a redirected connection). The call
// must fail as Unauthenticated naming the peer, and the impostor must never
// receive the caller's proof or request. (TensorPipe's counterpart is in
// tensorpipe_wire_test.)
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/future.h"
#include "proto/worker_service.grpc.pb.h"
#include "rpc/auth/handshake.h"
#include "rpc/init.h"
#include "rpc/runtime.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

// Answers a hello with a challenge made with the wrong secret, then reports
// what else the caller sent on that stream (nothing, if it hung up).
class Impostor final : public proto::Worker::Service {
 public:
  Future<std::string> after_challenge() { return after_challenge_.GetFuture(); }

  grpc::Status Exchange(grpc::ServerContext*,
                        grpc::ServerReaderWriter<proto::Frame, proto::Frame>* stream) override {
    proto::Frame hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    rpc::ServerHandshake pretender(auth::JobSecret("a guess at the secret"));
    auto challenge = pretender.OnHello(hello.envelope());
    if (!challenge.ok()) {
      after_challenge_.Set(challenge.status());
      return grpc::Status::OK;
    }
    proto::Frame reply;
    *reply.mutable_envelope() = *challenge;
    stream->Write(reply);
    proto::Frame next;
    after_challenge_.Set(stream->Read(&next)
                             ? absl::StrCat("envelope kind ", next.envelope().kind())
                             : std::string("nothing"));
    return grpc::Status::OK;
  }

 private:
  Promise<std::string> after_challenge_;
};

TEST(GrpcImpostorTest, WorkerRefusesAPeerThatCannotProveTheSecret) {
  Impostor impostor;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&impostor);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok()) << store.status();
  store::StoreClient registrar("127.0.0.1", (*store)->port(), absl::Seconds(10), TestJobSecret());
  ASSERT_TRUE(
      registrar.Set("tessera/workers/1", absl::StrCat("worker1\n127.0.0.1:", port, "\n")).ok());
  rpc::RpcOptions options = InProcessOptions("worker0", 0, 2, (*store)->port());
  options.backend = rpc::Backend::kGrpc;
  options.grpc.tls = {};  // the impostor listens without TLS
  auto runtime = rpc::TryInit(options, MakeTestRegistry());
  ASSERT_TRUE(runtime.ok()) << runtime.status();

  auto result =
      (*runtime)->RpcAsync<int64_t>("worker1", "echo", int64_t{5}).Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << result.status();
  EXPECT_NE(result.status().message().find("worker1"), std::string::npos) << result.status();
  auto sent = impostor.after_challenge().Wait(absl::Seconds(30));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, "nothing") << "the impostor received the caller's proof or request";
  EXPECT_TRUE((*runtime)->TryShutdown(/*graceful=*/false).ok());
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

}  // namespace
}  // namespace tessera::testing
