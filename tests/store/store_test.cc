#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "store/store_url.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/multiprocess.h"

namespace tessera::store {
namespace {

const auth::JobSecret kSecret("the job's secret");

enum class Backend { kBuiltin, kEtcd };

// The store's behaviour, the same on both backends — the built-in store and
// a real etcd member (see Note [The store on etcd]) — with values signed with a
// job secret and without.
class StoreTest : public ::testing::TestWithParam<std::tuple<Backend, bool>> {
 protected:
  static void SetUpTestSuite() {
    auto etcd = testing::EtcdCluster::StartLocal(1);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = etcd->release();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (std::get<0>(GetParam()) == Backend::kBuiltin) {
      auto server = StoreServer::Start("127.0.0.1", 0, secret());
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = *std::move(server);
    }
    client_ = Client();
  }
  auth::JobSecret secret() const { return std::get<1>(GetParam()) ? kSecret : auth::JobSecret(); }
  std::unique_ptr<StoreClient> Client() const {
    if (server_ != nullptr) {
      return std::make_unique<StoreClient>("127.0.0.1", server_->port(), absl::Seconds(10),
                                           secret());
    }
    // A job of its own per test: nothing is left from the others.
    const std::string job = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string name;
    for (char c : job) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    return *ConnectStore(etcd_->Url(name), absl::Seconds(10), secret());
  }
  static testing::EtcdCluster* etcd_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
};

testing::EtcdCluster* StoreTest::etcd_ = nullptr;

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreTest,
    ::testing::Combine(::testing::Values(Backend::kBuiltin, Backend::kEtcd), ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == Backend::kBuiltin ? "Builtin" : "Etcd") +
             (std::get<1>(info.param) ? "Signed" : "Unsigned");
    });

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

// One call reads many keys: what is there (binary values intact), waiting
// for the rest until the deadline, then missing ones are simply absent.
TEST_P(StoreTest, GetManyReadsEveryKeyInOneCall) {
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) {
    keys.push_back("many/" + std::to_string(i));
    if (i % 3 != 0) {
      ASSERT_TRUE(client_->Set(keys.back(), std::string("v\0", 2) + keys.back()).ok());
    }
  }
  auto some = client_->GetMany(keys, absl::Milliseconds(50));
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->size(), 100u);
  for (int i = 0; i < 150; ++i) {
    auto it = some->find(keys[i]);
    if (i % 3 == 0) {
      EXPECT_EQ(it, some->end()) << keys[i];
    } else {
      ASSERT_NE(it, some->end()) << keys[i];
      EXPECT_EQ(it->second, std::string("v\0", 2) + keys[i]);
    }
  }
  std::thread setter([&] {
    auto c = Client();
    for (int i = 0; i < 150; i += 3) EXPECT_TRUE(c->Set(keys[i], "late").ok());
  });
  auto all = client_->GetMany(keys, absl::Seconds(20));
  setter.join();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 150u);
  EXPECT_EQ(all->at("many/0"), "late");
  EXPECT_EQ(all->at("many/1"), std::string("v\0", 2) + "many/1");
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

TEST(StoreClientTest, UnreachableStoreFailsAtTheDeadlineSayingHowBusyTheHostWas) {
  auto server = StoreServer::Start("127.0.0.1", 0);
  const int port = (*server)->port();
  (*server)->Shutdown();
  StoreClient client("127.0.0.1", port, absl::Milliseconds(200));
  auto status = client.Set("k", "v");
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "this host's load average was ")) << status;
}

// A built-in store serving on STORE_PORT until killed, in a process of its
// own, so that the test can freeze it.
TESSERA_WORKER_SCENARIO(store_server) {
  auto server = StoreServer::Start("127.0.0.1", std::atoi(std::getenv("STORE_PORT")));
  if (!server.ok()) return 2;
  for (;;) pause();
}

// Whether every thread of process `pid` has stopped (SIGSTOP takes effect
// on each thread on its own, after kill() returned).
bool AllThreadsStopped(pid_t pid) {
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream stat(task.path() / "stat");
    const std::string text((std::istreambuf_iterator<char>(stat)),
                           std::istreambuf_iterator<char>());
    const size_t end = text.rfind(')');  // the state follows the command's name
    if (end == std::string::npos || end + 2 >= text.size() || text[end + 2] != 'T') return false;
  }
  return true;
}

// Runs `call` while process `store` is frozen (SIGSTOP) for longer than the
// 5 s a read's answer was once allowed, and longer than the client's
// keepalive ping and its timeout (store_channel.cc), then woken, as a
// loaded or paused machine is; checks the call took the freeze.
template <typename Call>
void WhileFrozen(pid_t store, const char* what, Call call) {
  constexpr absl::Duration kFreeze = absl::Seconds(11);
  ASSERT_EQ(::kill(store, SIGSTOP), 0);
  const absl::Time stopping = absl::Now();
  while (!AllThreadsStopped(store)) {
    ASSERT_LT(absl::Now() - stopping, absl::Seconds(10)) << "the store did not stop";
    std::this_thread::yield();
  }
  // The freeze's length is the fault itself, not a wait for something.
  std::thread thaw([store] {
    absl::SleepFor(kFreeze);
    ::kill(store, SIGCONT);
  });
  const absl::Time start = absl::Now();
  call();
  const absl::Duration took = absl::Now() - start;
  thaw.join();
  EXPECT_GE(took, kFreeze - absl::Seconds(1)) << what << ": the store answered while frozen?";
}

// See Note [Slow is not failed] (store_backend.h): across a freeze a read
// that waits for no key and a write still get their answers, within the
// client's timeout, and no error. (The keepalive drops the connection with
// the call on it; the call is sent again, not failed: CI once lost a job to
// that on a loaded machine.)
void ExpectCallsOutlastAFreeze(StoreClient& client, pid_t store) {
  ASSERT_TRUE(client.Set("k", "v").ok());
  WhileFrozen(store, "GetMany", [&] {
    auto values = client.GetMany({"k"}, absl::ZeroDuration());
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_EQ(values->count("k") ? values->at("k") : "", "v");
  });
  WhileFrozen(store, "Set", [&] {
    const absl::Status status = client.Set("k", "w");
    EXPECT_TRUE(status.ok()) << status;
  });
  auto got = client.Get("k", absl::ZeroDuration());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "w");
}

TEST(StoreClientTest, ABuiltinStoreThatAnswersLateIsWaitedForNotFailed) {
  const int port = testing::FreeLoopbackPort();
  testing::WorkerProcess server("store_server", {{"STORE_PORT", std::to_string(port)}});
  StoreClient client("127.0.0.1", port, absl::Seconds(60));
  ExpectCallsOutlastAFreeze(client, server.pid());
}

// The writes that must not apply twice, across a freeze: each is sent again
// on a new connection once the keepalive dropped the first (the client
// before request ids failed them Unavailable: checked), and each is
// answered, applied once. That the store applies a request id once when
// both attempts reach it is applied_writes_test's.
TEST(StoreClientTest, ABuiltinStoreAppliesAWriteSentAgainOnce) {
  const int port = testing::FreeLoopbackPort();
  testing::WorkerProcess server("store_server", {{"STORE_PORT", std::to_string(port)}});
  StoreClient client("127.0.0.1", port, absl::Seconds(60));
  ASSERT_TRUE(client.Set("doomed", "x").ok());
  WhileFrozen(server.pid(), "Add", [&] {
    auto added = client.Add("counter", 1);
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_EQ(*added, 1);
  });
  WhileFrozen(server.pid(), "CompareSet", [&] {
    auto set = client.CompareSet("owner", "", "me");
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(*set, "me");
  });
  WhileFrozen(server.pid(), "Delete", [&] {
    auto deleted = client.Delete("doomed");
    ASSERT_TRUE(deleted.ok()) << deleted.status();
    EXPECT_TRUE(*deleted) << "the repeat answered, not the attempt that deleted";
  });
  auto counter = client.Get("counter", absl::ZeroDuration());
  ASSERT_TRUE(counter.ok()) << counter.status();
  EXPECT_EQ(*counter, "1") << "an attempt of the Add was applied twice";
}

TEST(StoreClientTest, AnEtcdStoreThatAnswersLateIsWaitedForNotFailed) {
  auto etcd = testing::EtcdCluster::StartLocal(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  auto client = ConnectStore((*etcd)->Url("late"), absl::Seconds(60), auth::JobSecret());
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectCallsOutlastAFreeze(**client, (*etcd)->pid(0));
}

}  // namespace
}  // namespace tessera::store
