#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::store {
namespace {

const auth::JobSecret kSecret("the job's secret");

// The store's behaviour, with calls signed with a job secret and without.
class StoreTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto server = StoreServer::Start("127.0.0.1", 0, secret());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = Client();
  }
  auth::JobSecret secret() const { return GetParam() ? kSecret : auth::JobSecret(); }
  std::unique_ptr<StoreClient> Client() const {
    return std::make_unique<StoreClient>("127.0.0.1", server_->port(), absl::Seconds(10),
                                         secret());
  }
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
};

INSTANTIATE_TEST_SUITE_P(Signed, StoreTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Signed" : "Unsigned"; });

TEST_P(StoreTest, SetThenGet) {
  ASSERT_TRUE(client_->Set("k", std::string("v\0x", 3)).ok());
  EXPECT_EQ(*client_->Get("k", absl::Seconds(1)), std::string("v\0x", 3));
}

TEST_P(StoreTest, GetWaitsForAKeySetLater) {
  std::thread setter([&] {
    // The getter is already waiting or will find the key: both are correct.
    EXPECT_TRUE(Client()->Set("late", "here").ok());
  });
  EXPECT_EQ(*client_->Get("late", absl::Seconds(10)), "here");
  setter.join();
}

TEST_P(StoreTest, GetAndWaitTimeOutNamingTheKeys) {
  auto get = client_->Get("absent", absl::Milliseconds(50));
  EXPECT_EQ(get.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(get.status().message().find("absent"), std::string::npos);
  ASSERT_TRUE(client_->Set("a", "1").ok());
  auto wait = client_->Wait({"a", "b", "c"}, absl::Milliseconds(50));
  EXPECT_EQ(wait.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(wait.message().find("b, c"), std::string::npos) << wait;
}

TEST_P(StoreTest, ConcurrentAddsAreAtomic) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto c = Client();
      for (int i = 0; i < 50; ++i) EXPECT_TRUE(c->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*client_->Add("counter", 0), 200);
  ASSERT_TRUE(client_->Set("text", "abc").ok());
  EXPECT_EQ(client_->Add("text", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, CompareSetAndDelete) {
  EXPECT_EQ(*client_->CompareSet("cs", "", "first"), "first");
  EXPECT_EQ(*client_->CompareSet("cs", "wrong", "second"), "first");
  EXPECT_EQ(*client_->CompareSet("cs", "first", "second"), "second");
  EXPECT_TRUE(*client_->Delete("cs"));
  EXPECT_FALSE(*client_->Delete("cs"));
}

TEST(StoreClientTest, UnreachableStoreFailsAtTheDeadline) {
  auto server = StoreServer::Start("127.0.0.1", 0);
  const int port = (*server)->port();
  (*server)->Shutdown();
  StoreClient client("127.0.0.1", port, absl::Milliseconds(200));
  auto status = client.Set("k", "v");
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

}  // namespace
}  // namespace tessera::store
