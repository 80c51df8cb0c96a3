// The store on etcd (see Note [The store on etcd], store/etcd_store_backend.h),
// against real etcd members: what the built-in store cannot do — survive
// the loss of a member — and what etcd needs of its own (the job secret on
// values, the job's key prefix, store addresses). store_test runs the
// behaviour both backends share.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/etcd_store_backend.h"
#include "store/store_url.h"
#include "tests/testing/etcd_cluster.h"

namespace tessera::store {
namespace {

const auth::JobSecret kSecret("the job's secret");

std::unique_ptr<StoreClient> Connect(const std::string& url, absl::Duration timeout,
                                     auth::JobSecret secret = kSecret) {
  auto client = ConnectStore(url, timeout, std::move(secret));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Three members, one SIGKILLed: the other two are a majority, and every
// call goes on — writes, compare-and-set, a wait for a key another client
// sets. A second one killed leaves no majority: calls fail at their
// deadline, saying so, rather than answer from a minority.
TEST(EtcdStoreTest, TheStoreOutlivesAMemberButNotAMajority) {
  auto etcd = testing::EtcdCluster::StartLocal(3);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string url = (*etcd)->Url("members");
  auto client = Connect(url, absl::Seconds(20));
  ASSERT_TRUE(client->Set("before", "1").ok());

  (*etcd)->Kill(0);
  for (int i = 0; i < 20; ++i) {
    const std::string key = absl::StrCat("after", i);
    ASSERT_TRUE(client->Set(key, "v").ok()) << (*etcd)->Logs();
    EXPECT_EQ(*client->Get(key, absl::Seconds(5)), "v");
    EXPECT_EQ(*client->CompareSet(absl::StrCat("claim", i), "", "mine"), "mine");
  }
  EXPECT_EQ(*client->Get("before", absl::Seconds(5)), "1");
  std::thread setter([&] { EXPECT_TRUE(Connect(url, absl::Seconds(20))->Set("late", "x").ok()); });
  EXPECT_EQ(*client->Get("late", absl::Seconds(20)), "x");
  setter.join();

  (*etcd)->Kill(1);
  const absl::Status status = Connect(url, absl::Seconds(3))->Set("k", "v");
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "majority")) << status;
}

// A value written without the job's secret — by another job under the same
// prefix, or anyone who can write to etcd — is refused, naming the key, and
// no waiter takes it for the real one.
TEST(EtcdStoreTest, AValueNotWrittenWithTheJobSecretIsRefused) {
  auto etcd = testing::EtcdCluster::StartLocal(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string url = (*etcd)->Url("signed");
  auto job = Connect(url, absl::Seconds(5));
  for (const auth::JobSecret& forgers : {auth::JobSecret("another secret"), auth::JobSecret()}) {
    ASSERT_TRUE(Connect(url, absl::Seconds(5), forgers)->Set("address", "6.6.6.6:1").ok());
    for (const absl::Status& status :
         {job->Get("address", absl::Seconds(1)).status(), job->Wait({"address"}, absl::Seconds(1)),
          job->Add("address", 1).status(), job->CompareSet("address", "x", "y").status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "/tessera/signed/address")) << status;
    }
  }
  ASSERT_TRUE(job->Set("address", "10.0.0.1:4000").ok());
  EXPECT_EQ(*job->Get("address", absl::Seconds(1)), "10.0.0.1:4000");
}

// More keys than one etcd transaction may read, written while they are
// waited for: every one is seen, none is missed between read and watch.
TEST(EtcdStoreTest, WaitsForMoreKeysThanOneTransactionHolds) {
  auto etcd = testing::EtcdCluster::StartLocal(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string url = (*etcd)->Url("many");
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back(absl::StrCat("rank/", i));
  std::thread writer([&] {
    auto client = Connect(url, absl::Seconds(10));
    for (const std::string& key : keys) EXPECT_TRUE(client->Set(key, "here").ok());
  });
  const absl::Status all = Connect(url, absl::Seconds(10))->Wait(keys, absl::Seconds(60));
  writer.join();
  EXPECT_TRUE(all.ok()) << all;
}

// The launcher's hold on a job's keys: counted (a prefix left by another
// job is refused) and cleared, all of them or all but the launchers' own.
TEST(EtcdStoreTest, ClearsTheJobsKeysAndNoOtherJobs) {
  auto etcd = testing::EtcdCluster::StartLocal(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  auto job = Connect((*etcd)->Url("job"), absl::Seconds(5));
  auto neighbour = Connect((*etcd)->Url("job2"), absl::Seconds(5));
  for (const char* key : {"a", "tessera-run/0/open", "z"}) ASSERT_TRUE(job->Set(key, "1").ok());
  ASSERT_TRUE(neighbour->Set("a", "1").ok());
  auto backend = EtcdStoreBackend::Connect(*ParseStoreUrl((*etcd)->Url("job")), kSecret);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(*(*backend)->CountKeys(absl::Seconds(5)), 3);
  ASSERT_TRUE((*backend)->Clear("tessera-run/", absl::Seconds(5)).ok());
  EXPECT_EQ(*(*backend)->CountKeys(absl::Seconds(5)), 1);
  EXPECT_TRUE(job->Get("tessera-run/0/open", absl::ZeroDuration()).ok());
  ASSERT_TRUE((*backend)->Clear("", absl::Seconds(5)).ok());
  EXPECT_EQ(*(*backend)->CountKeys(absl::Seconds(5)), 0);
  EXPECT_EQ(*neighbour->Get("a", absl::ZeroDuration()), "1");
}

TEST(StoreUrlTest, ParsesBothKindsOfStoreAndNamesWhatIsWrong) {
  auto builtin = ParseStoreUrl("10.0.0.1:29500");
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  EXPECT_FALSE(builtin->etcd);
  EXPECT_EQ(builtin->host, "10.0.0.1");
  EXPECT_EQ(builtin->port, 29500);
  auto etcd = ParseStoreUrl("etcd://h1:2379,[fd00::2]:2379,h3:2379/run-7");
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  EXPECT_TRUE(etcd->etcd);
  EXPECT_EQ(etcd->endpoints.size(), 3u);
  EXPECT_EQ(etcd->host, "h1");
  EXPECT_EQ(etcd->key_prefix, "/tessera/run-7/");
  EXPECT_EQ(ParseStoreUrl("etcd://h1:2379")->key_prefix, "/tessera/default/");
  for (const char* bad : {"etcd://", "etcd://h1", "etcd://h1:99999", "etcd://h1:2379/a/b",
                          "h1:1,h2:2", "http://h1:2379", ""}) {
    auto parsed = ParseStoreUrl(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tessera::store
