// The built-in store applies a write that must not apply twice (Add,
// CompareSet, Delete) once per request id, and answers an attempt sent
// again as it answered the first (store/applied_writes.h): what a client
// whose connection dropped after the store applied its call, before the
// answer came back, sees when it sends the call again.
#include "store/applied_writes.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "proto/store.grpc.pb.h"
#include "store/store_server.h"

namespace tessera::store {
namespace {

class AppliedWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = proto::Store::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  int64_t Add(const std::string& key, uint64_t request_id) {
    proto::AddRequest request;
    request.set_key(key);
    request.set_delta(1);
    request.set_request_id(request_id);
    proto::AddResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->Add(&context, request, &response).ok());
    return response.value();
  }
  std::string CompareSet(const std::string& expected, const std::string& desired,
                         uint64_t request_id) {
    proto::CompareSetRequest request;
    request.set_key("owner");
    request.set_expected(expected);
    request.set_desired(desired);
    request.set_request_id(request_id);
    proto::CompareSetResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->CompareSet(&context, request, &response).ok());
    return response.value();
  }
  bool Delete(const std::string& key, uint64_t request_id) {
    proto::DeleteRequest request;
    request.set_key(key);
    request.set_request_id(request_id);
    proto::DeleteResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->Delete(&context, request, &response).ok());
    return response.deleted();
  }

  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<proto::Store::Stub> stub_;
};

TEST_F(AppliedWritesTest, AnAddSentAgainIsAppliedOnceAndAnsweredAlike) {
  EXPECT_EQ(Add("counter", 7), 1);
  EXPECT_EQ(Add("counter", 7), 1);  // the same call again
  EXPECT_EQ(Add("counter", 8), 2);
  // Without a request id (0), every attempt is a call of its own.
  EXPECT_EQ(Add("counter", 0), 3);
  EXPECT_EQ(Add("counter", 0), 4);
}

TEST_F(AppliedWritesTest, ACompareSetSentAgainGetsItsOwnAnswerAfterAnotherWrite) {
  EXPECT_EQ(CompareSet("", "first", 21), "first");
  EXPECT_EQ(CompareSet("first", "second", 22), "second");
  // Evaluated again, it would lose to the second and answer "second": the
  // caller would think it never won.
  EXPECT_EQ(CompareSet("", "first", 21), "first");
}

TEST_F(AppliedWritesTest, ADeleteSentAgainStillSaysItDeleted) {
  proto::SetRequest set;
  set.set_key("doomed");
  set.set_value("x");
  proto::SetResponse set_response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Set(&context, set, &set_response).ok());
  EXPECT_TRUE(Delete("doomed", 31));
  EXPECT_TRUE(Delete("doomed", 31));
  EXPECT_FALSE(Delete("doomed", 32));
}

TEST(AppliedWrites, KeepsTheNewestWithinItsBounds) {
  AppliedWrites applied;
  proto::AddResponse answer;
  for (uint64_t id = 1; id <= AppliedWrites::kMaxRecords + 10; ++id) {
    answer.set_value(static_cast<int64_t>(id));
    applied.Record(id, answer);
  }
  EXPECT_EQ(applied.size(), AppliedWrites::kMaxRecords);
  proto::AddResponse replayed;
  EXPECT_FALSE(applied.Replay(10, &replayed));  // among the oldest: gone
  ASSERT_TRUE(applied.Replay(AppliedWrites::kMaxRecords + 10, &replayed));
  EXPECT_EQ(replayed.value(), static_cast<int64_t>(AppliedWrites::kMaxRecords + 10));
  // Large answers: bounded by bytes too.
  AppliedWrites big;
  proto::CompareSetResponse value;
  value.set_value(std::string(1 << 20, 'v'));
  for (uint64_t id = 1; id <= 40; ++id) big.Record(id, value);
  EXPECT_LE(big.size(), AppliedWrites::kMaxBytes / (1 << 20));
  proto::CompareSetResponse newest;
  EXPECT_TRUE(big.Replay(40, &newest));
}

}  // namespace
}  // namespace tessera::store
