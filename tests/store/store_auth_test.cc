// A store started with a job secret serves only calls signed with it, and
// its clients believe only answers signed with it (see Note [Store call
// authentication]). Each refused call must leave the store unchanged.
// (Also: a replayed request is refused.)
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "proto/store.grpc.pb.h"
#include "store/store_auth.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::store {
namespace {

const auth::JobSecret kSecret("the job's secret");

class StoreAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *StoreServer::Start("127.0.0.1", 0, kSecret);
    member_ = std::make_unique<StoreClient>("127.0.0.1", server_->port(), absl::Seconds(10),
                                            kSecret);
    ASSERT_TRUE(member_->Set("address", "10.0.0.1:1234").ok());
  }
  // The value the job's own processes read: the refused calls must not have
  // changed it.
  void ExpectUnchanged() {
    EXPECT_EQ(*member_->Get("address", absl::Seconds(1)), "10.0.0.1:1234");
    EXPECT_FALSE(*member_->Delete("planted"));
  }
  // A bare gRPC stub, to send signatures the way an attacker could.
  std::unique_ptr<proto::Store::Stub> RawStub() const {
    return proto::Store::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> member_;
};

TEST_F(StoreAuthTest, CallerWithoutTheSecretIsRefusedAndChangesNothing) {
  for (const auth::JobSecret& secret : {auth::JobSecret(), auth::JobSecret("another job's")}) {
    StoreClient stranger("127.0.0.1", server_->port(), absl::Seconds(10), secret);
    auto set = stranger.Set("address", "6.6.6.6:1");
    EXPECT_EQ(set.code(), absl::StatusCode::kUnauthenticated) << set;
    EXPECT_NE(set.message().find("TESSERA_JOB_SECRET"), std::string::npos) << set;
    EXPECT_NE(set.message().find("set 'address'"), std::string::npos) << set;
    EXPECT_EQ(stranger.Set("planted", "x").code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(stranger.Get("address", absl::Seconds(1)).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(stranger.Add("address", 1).status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(stranger.Delete("address").status().code(), absl::StatusCode::kUnauthenticated);
  }
  ExpectUnchanged();
}

// A store that does not know the secret — another job's on the same
// address, or a process posing as the store — is not believed: one without
// a secret answers, unsigned, and the client rejects the answer; one with
// another secret refuses the call itself.
TEST_F(StoreAuthTest, AnswersOfAStoreWithoutTheSecretAreNotBelieved) {
  auto impostor = *StoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(StoreClient("127.0.0.1", impostor->port()).Set("address", "6.6.6.6:1").ok());
  StoreClient fooled("127.0.0.1", impostor->port(), absl::Seconds(10), kSecret);
  auto get = fooled.Get("address", absl::Seconds(1));
  EXPECT_EQ(get.status().code(), absl::StatusCode::kUnauthenticated) << get.status();
  EXPECT_NE(get.status().message().find("not from a store that knows this job's secret"),
            std::string::npos)
      << get.status();

  auto other_job = *StoreServer::Start("127.0.0.1", 0, auth::JobSecret("another job's"));
  StoreClient misdirected("127.0.0.1", other_job->port(), absl::Seconds(10), kSecret);
  auto refused = misdirected.Get("address", absl::Seconds(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
}

// A signature is for one request: the same nonce and MAC on another request
// (another key or value) is refused.
TEST_F(StoreAuthTest, SignatureDoesNotCoverAnotherRequest) {
  auto stub = RawStub();
  const StoreAuth auth(kSecret);
  proto::SetRequest signed_request;
  signed_request.set_key("harmless");
  signed_request.set_value("1");

  grpc::ClientContext context;
  auth.SignRequest(&context, "Set", signed_request);
  proto::SetRequest forged = signed_request;
  forged.set_key("planted");
  proto::SetResponse response;
  grpc::Status status = stub->Set(&context, forged, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // And a signature for Set does not make a Delete.
  grpc::ClientContext delete_context;
  auth.SignRequest(&delete_context, "Set", signed_request);
  proto::DeleteRequest delete_request;
  delete_request.set_key("address");
  proto::DeleteResponse deleted;
  status = stub->Delete(&delete_context, delete_request, &deleted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // The genuine signed request goes through, its answer checks out.
  grpc::ClientContext genuine;
  const std::string nonce = auth.SignRequest(&genuine, "Set", signed_request);
  ASSERT_TRUE(stub->Set(&genuine, signed_request, &response).ok());
  EXPECT_TRUE(auth.CheckResponse(genuine, "Set", nonce, response).ok());
  ExpectUnchanged();
}

// A captured request resent verbatim (same nonce, same MAC) is refused, so
// an add is not counted twice; the next genuine call goes through.
TEST_F(StoreAuthTest, AReplayedRequestIsRefused) {
  auto stub = RawStub();
  const StoreAuth auth(kSecret);
  proto::AddRequest add;
  add.set_key("barrier");
  add.set_delta(1);
  const StoreAuth::Signature captured = auth.Sign("Add", add);
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext context;
    StoreAuth::Attach(captured, &context);
    proto::AddResponse response;
    const grpc::Status status = stub->Add(&context, add, &response);
    if (attempt == 0) {
      EXPECT_TRUE(status.ok()) << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_NE(status.error_message().find("replayed"), std::string::npos)
          << status.error_message();
    }
  }
  EXPECT_EQ(*member_->Add("barrier", 0), 1);  // counted once
  grpc::ClientContext next;
  auth.SignRequest(&next, "Add", add);
  proto::AddResponse response;
  EXPECT_TRUE(stub->Add(&next, add, &response).ok());
  EXPECT_EQ(response.value(), 2);
}

}  // namespace
}  // namespace tessera::store
