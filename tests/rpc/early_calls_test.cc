// Calls that reach a worker before it has met everyone at the rendezvous
// (a fast peer calling a slow starter) wait for its start, then run on its
// pool like any other call: side by side, and not on the thread that is
// starting the worker. They used to run on that thread, one after another,
// so one blocking call held up the worker's start — and every other early
// call — for its whole deadline (CI's bounded_queues_test hang).
//
// worker0 is played by this test with a raw TensorPipe peer, so that it can
// call worker1 while worker1 still waits for worker0's rendezvous entry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/raw_tensorpipe_peer.h"

namespace tessera::testing {
namespace {

constexpr int kEarlyCalls = 3;

TEST(EarlyCallsTest, CallsBeforeTheRendezvousEndsRunSideBySideOnThePool) {
  auto server = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(server.ok()) << server.status();
  store::StoreClient store("127.0.0.1", (*server)->port(), absl::Seconds(60), TestJobSecret());
  WorkerProcess worker1("serve", WorkerEnv(1, 2, (*server)->port()));

  // worker1 has published its entry ("name\naddress\n...") and now waits
  // for worker0's, which nobody has written yet.
  auto entry = store.Get("tessera/workers/1", absl::Seconds(60));
  ASSERT_TRUE(entry.ok()) << entry.status();
  const std::vector<std::string> fields = absl::StrSplit(*entry, '\n');
  ASSERT_GE(fields.size(), 2u) << *entry;
  RawTensorPipePeer worker0(TestJobSecret());
  auto pipe = worker0.Connect(fields[1]);
  ASSERT_TRUE(RawTensorPipePeer::Authenticate(pipe, TestJobSecret(), {"worker0", 0}).ok());
  for (int i = 0; i < kEarlyCalls; ++i) {
    rpc::Message call = CallEnvelope("block", i + 1);
    call.envelope.add_args()->set_string_value(absl::StrCat("early/", i));
    call.envelope.set_timeout_us(absl::ToInt64Microseconds(absl::Seconds(60)));
    ASSERT_TRUE(RawTensorPipePeer::Write(pipe, std::move(call)).ok());
  }
  // Not started: none runs yet ("block" marks its start in the store).
  EXPECT_FALSE(store.Get("early/0/started", absl::ZeroDuration()).ok());

  // worker0 arrives at the rendezvous; worker1 starts, and all the early
  // calls run at once — each blocks until released, so one running alone
  // would leave the others' marks unset.
  ASSERT_TRUE(
      store.Set("tessera/workers/0", absl::StrCat("worker0\n", worker0.Listen(), "\n")).ok());
  for (int i = 0; i < kEarlyCalls; ++i) {
    ASSERT_TRUE(store.Get(absl::StrCat("early/", i, "/started"), absl::Seconds(30)).ok())
        << "early call " << i << " did not start while the others ran";
  }
  for (int i = 0; i < kEarlyCalls; ++i) {
    ASSERT_TRUE(store.Set(absl::StrCat("early/", i), "go").ok());
  }
  for (int i = 0; i < kEarlyCalls; ++i) {
    auto response = RawTensorPipePeer::Read(pipe);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->envelope.status().code(), 0) << response->envelope.status().message();
    EXPECT_TRUE(response->envelope.result().bool_value());
  }
  // worker1 would now wait for worker0 in its graceful shutdown; the test
  // is over (the destructor kills it).
}

}  // namespace
}  // namespace tessera::testing
