// The sharded parameter server (ps/) across real processes: two servers,
// the test process and child processes as trainers, through the real
// transports (both RPC backends: conformance.bzl).
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "ps/ps_messages.h"
#include "ps/row_store.h"
#include "rpc/internal_service.h"
#include "tests/ps/ps_world.h"

namespace tessera::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

class PsTest : public PsWorld {};

// Scenario: a dense table split over two servers. Rows start from their key
// alone, as one local store of the whole table makes them; a push moves the
// rows it names on the servers, by the table's optimizer, and only those.
TEST_F(PsTest, RowsStartFromTheirKeysAndPushesMoveThemOnTheServers) {
  StartPs(2, 0, "idle");
  at::Tensor keys = at::arange(10, at::kLong);
  at::Tensor before = client().Pull("dense", keys).Get(kTimeout);
  ps::RowStore whole(TestTable("dense"), 0, 1);
  EXPECT_TRUE(at::allclose(before, whole.Read(keys))) << before;

  at::Tensor touched = at::full({3}, 7, at::kLong);
  touched[1] = 2;  // keys 7, 2, 7: one on each shard, 7 twice (its gradients add)
  client().Push("dense", touched, at::ones({3, 4})).Get(kTimeout);
  at::Tensor after = client().Pull("dense", keys).Get(kTimeout);
  at::Tensor expected = before.clone();
  expected[7] -= 0.5 * 2;
  expected[2] -= 0.5;
  EXPECT_TRUE(at::allclose(after, expected)) << after << expected;
  auto stats = client().Stats("dense").Get(kTimeout);
  EXPECT_EQ(stats[0][0] + stats[1][0], 10);  // rows 0..4 and 5..9
  EXPECT_EQ(stats[0][1], 1);
  EXPECT_EQ(stats[1][1], 1);
}

// Scenario: a call of two tables whose keys lie on both shards. It is one
// message to each shard, not one per table and shard; each table's rows
// come back as its own call would give them; a table that does not exist
// fails the call by name.
TEST_F(PsTest, ACallOfSeveralTablesIsOneMessagePerShard) {
  StartPs(2, 0, "idle");
  metrics::Enable();
  auto messages = [](const char* service) { return metrics::Snapshot().calls_out[service].calls; };
  const at::Tensor counted = at::arange(64, at::kLong), dense = at::arange(10, at::kLong);
  uint64_t before = messages(ps::services::kPush);
  ASSERT_TRUE(
      client()
          .Push({{"counts", counted, at::ones({64, 1})}, {"dense", dense, at::ones({10, 4})}})
          .Wait(kTimeout)
          .ok());
  EXPECT_EQ(messages(ps::services::kPush) - before, 2u);
  before = messages(ps::services::kPull);
  auto rows = client().Pull({{"counts", counted, {}}, {"dense", dense, {}}}).Get(kTimeout);
  EXPECT_EQ(messages(ps::services::kPull) - before, 2u);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(at::allclose(rows[0], at::ones({64, 1}))) << rows[0];
  EXPECT_TRUE(at::allclose(rows[1], client().Pull("dense", dense).Get(kTimeout))) << rows[1];
  auto missing = client().Pull({{"counts", counted, {}}, {"nope", dense, {}}}).Wait(kTimeout);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "'nope'")) << missing.status();
}

// Scenario: three trainers push a counting table's keys (repeats, shared
// keys, both shards) concurrently. Every count equals the pushes made.
TEST_F(PsTest, ACountingTableEqualsThePushesEveryTrainerMade) {
  StartPs(2, 2, "count");
  ExpectCountsOfEveryPush();
}

// Scenario: a synchronous table, two trainers. Each pushes to key 5 at
// clock 0 (worker0 1s, worker3 3s); worker0's pull at clock 1 waits until
// worker3 ended clock 0 too, then sees the average applied once: 2.
TEST_F(PsTest, ASynchronousTableAppliesEveryTrainersPushOnceAClock) {
  StartPs(2, 1, "sync");
  at::Tensor key = at::full({1}, 5, at::kLong);
  client().Push("sync", key, at::ones({1, 2})).Get(kTimeout);
  ASSERT_TRUE(rt().store().Get("ps-test/pushed/3", kTimeout).ok());
  client().Clock().Get(kTimeout);
  Future<at::Tensor> pull = client().Pull("sync", key);
  EXPECT_EQ(pull.Wait(absl::Milliseconds(300)).status().code(), absl::StatusCode::kDeadlineExceeded)
      << "the pull at clock 1 did not wait for worker3's clock";
  ASSERT_TRUE(rt().store().Set("ps-test/clock", "1").ok());
  at::Tensor row = pull.Get(kTimeout);
  EXPECT_TRUE(at::allclose(row, at::full({1, 2}, 2.0))) << row;
  // The pull waited for key 5's shard alone; worker3's clock reached the
  // other once its Clock() completed.
  ASSERT_TRUE(rt().store().Get("ps-test/clocked/3", kTimeout).ok());
  auto stats = client().Stats("sync").Get(kTimeout);
  EXPECT_EQ(stats[0][3], 1);  // one clock applied on each shard
  EXPECT_EQ(stats[1][3], 1);
  EXPECT_EQ(stats[0][1] + stats[1][1], 2);
}

// Scenario: worker0 sends 200 pushes to both shards of "counts" at once,
// with a backup a shard. Each shard's primary takes them as they come and
// sends its backup the changes made while a message to it is in flight
// together (see Note [Replication batches], ps/server_replication.cc): fewer
// messages than pushes, and the replicas still agree on every count.
TEST_F(PsTest, ABackupGetsTheChangesOfPushesMadeTogetherInFewerMessages) {
  StartPs(2, 0, "idle");
  constexpr int kPushes = 200;
  const at::Tensor keys = at::arange(8, at::kLong);
  std::vector<Future<std::monostate>> pushes;
  for (int i = 0; i < kPushes; ++i)
    pushes.push_back(client().Push("counts", keys, at::ones({8, 1})));
  for (auto& push : pushes) push.Get(kTimeout);
  auto stats = client().Stats("counts").Get(kTimeout);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(stats[s][1], kPushes) << "shard " << s;
    EXPECT_LT(stats[s][4], kPushes) << "shard " << s << ": a message of changes a push";
    std::printf("shard %d: %d pushes, %lld messages to its backup\n", s, kPushes,
                static_cast<long long>(stats[s][4]));
  }
  EXPECT_TRUE(at::allclose(client().Pull("counts", keys).Get(kTimeout),
                           at::full({8, 1}, static_cast<float>(kPushes))));
  ExpectReplicasAgree();
}

// Scenario: bounded staleness 1. worker0 runs two clocks ahead of worker3,
// which has not ended clock 0: its pull at clock 2 waits; when it may not
// wait longer, the error names the trainer it waited for.
TEST_F(PsTest, ABoundedStalenessPullWaitsForTheSlowestAndNamesIt) {
  StartPs(2, 1, "ssp");
  at::Tensor key = at::full({1}, 9, at::kLong);
  client().Clock().Get(kTimeout);
  client().Pull("ssp", key).Get(kTimeout);  // clock 1: 1 - 1 <= 0, no wait
  client().Clock().Get(kTimeout);
  // A pull at clock 2 with a 10 s deadline, straight to key 9's shard: the
  // shard gives up 2 s before the caller would, naming whom it waited for
  // (2 s, not the 0.6 s of a 3 s call: its answer must beat the caller's
  // own deadline on a loaded machine, a sanitizer's included).
  const int64_t shard = ps::ShardsOfKeys(TestTable("ssp"), 2, key)->item<int64_t>();
  rpc::CallOptions short_call{absl::Seconds(10)};
  auto expired =
      rt().CallAsync(absl::StrCat("worker", shard + 1), ps::services::kPull,
                     rpc::EncodeMessage(ps::PullRequest{{"ssp"}, 1, shard, {2}, {key.clone()}}),
                     short_call)
          .Wait(kTimeout);
  Future<at::Tensor> pull = client().Pull("ssp", key);
  EXPECT_EQ(pull.Wait(absl::Milliseconds(300)).status().code(), absl::StatusCode::kDeadlineExceeded)
      << "the pull at clock 2 did not wait for worker3 at clock 0";
  ASSERT_TRUE(rt().store().Set("ps-test/clock", "1").ok());
  EXPECT_TRUE(pull.Wait(kTimeout).ok());
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kDeadlineExceeded) << expired.status();
  EXPECT_TRUE(absl::StrContains(expired.status().message(), "rank 3 at clock 0"))
      << expired.status();
}

// Scenario: a push sent again with its sequence (a retry after a lost
// answer) is acknowledged and not applied twice; a request routed by
// another epoch, with keys of another shard, of the wrong types, or with
// fields of unequal lengths is refused with its reason, and the server
// goes on serving.
TEST_F(PsTest, PushesApplyOnceAndBadRequestsAreRefusedByName) {
  StartPs(2, 0, "idle");
  auto send = [&](const ps::PushRequest& push) {
    return rt().CallAsync("worker1", ps::services::kPush, rpc::EncodeMessage(push)).Wait(kTimeout);
  };
  // A key of shard 0: find one.
  int64_t key = 0;
  while (ps::ShardsOfKeys(TestTable("counts"), 2, at::full({1}, key, at::kLong))->item<int64_t>() !=
         0) {
    ++key;
  }
  at::Tensor keys = at::full({1}, key, at::kLong);
  ps::PushRequest push{{"counts"}, 1, 0, /*sequences=*/{1000}, {0}, {keys}, {at::ones({1, 1})}};
  ASSERT_TRUE(send(push).ok());
  ASSERT_TRUE(send(push).ok());
  EXPECT_EQ(client().Pull("counts", keys).Get(kTimeout)[0][0].item<float>(), 1);
  EXPECT_EQ(client().Stats("counts").Get(kTimeout)[0][2], 1);  // one duplicate

  ps::PushRequest stale = push;
  stale.epoch = 7;
  stale.sequences = {1001};
  auto refused = send(stale);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "routed by shard map epoch 7"))
      << refused.status();
  ps::PushRequest elsewhere = push;
  elsewhere.sequences = {1002};
  at::Tensor other = at::full({1}, key + 1, at::kLong);
  while (ps::ShardsOfKeys(TestTable("counts"), 2, other)->item<int64_t>() == 0) other += 1;
  elsewhere.keys = {other};
  refused = send(elsewhere);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "is not on shard 0"))
      << refused.status();
  ps::PushRequest misshapen = push;
  misshapen.sequences = {1003};
  misshapen.grads = {at::ones({1, 3})};
  refused = send(misshapen);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "shape [1, 1]")) << refused.status();
  ps::PushRequest float_keys = push;
  float_keys.sequences = {1004};
  float_keys.keys = {at::ones({1})};
  EXPECT_EQ(send(float_keys).status().code(), absl::StatusCode::kInvalidArgument);
  // A message whose fields disagree on how many tables it is about.
  ps::PushRequest uneven = push;
  uneven.sequences = {1005, 1006};
  refused = send(uneven);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "of 1 tables with a field of 2 parts"))
      << refused.status();
  auto uneven_pull =
      rt().CallAsync("worker1", ps::services::kPull,
                     rpc::EncodeMessage(ps::PullRequest{{"counts"}, 1, 0, {}, {keys}}))
          .Wait(kTimeout);
  EXPECT_EQ(uneven_pull.status().code(), absl::StatusCode::kInvalidArgument)
      << uneven_pull.status();
  // None of them changed anything, and the server still serves.
  EXPECT_EQ(client().Pull("counts", keys).Get(kTimeout)[0][0].item<float>(), 1);
}

// Scenario: a trainer declares a table of another shape than the servers':
// it is refused at Connect, both shapes named.
TEST_F(PsTest, ATrainerWithAnotherTableShapeIsRefused) {
  StartPs(2, 0, "idle");
  ps::PsOptions options = TestPsOptions();
  options.tables[1] = ps::TableOptions::Dense("dense", 10, 5);
  auto refused = ps::PsClient::Connect(rt(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "dense: dense 10 x 5 here but dense: dense 10 x 4 on the servers"))
      << refused.status();
}

// Scenario: a trainer joins a synchronous table after three clocks were
// applied (only worker0 is counted from the start). It pulls the current
// rows (3, the three clocks' pushes), then takes part in the next clock:
// worker0's pull at clock 4 waits for it and sees the average of both
// pushes (2 and 10) added once: 3 + 6.
TEST_F(PsTest, ATrainerJoiningLaterPullsTheCurrentRowsAndTakesPartInTheNextClock) {
  StartPs(2, 1, "late", "worker0");
  at::Tensor key = at::full({1}, 5, at::kLong);
  for (int clock = 0; clock < 3; ++clock) {
    client().Push("sync", key, at::ones({1, 2})).Get(kTimeout);
    client().Clock().Get(kTimeout);
  }
  EXPECT_TRUE(at::allclose(client().Pull("sync", key).Get(kTimeout), at::full({1, 2}, 3.0)));
  ASSERT_TRUE(rt().store().Set("ps-test/join", "1").ok());
  auto seen = rt().store().Get("ps-test/late/pulled", kTimeout);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, "3 at clock 3");
  client().Push("sync", key, at::full({1, 2}, 2.0)).Get(kTimeout);
  client().Clock().Get(kTimeout);
  at::Tensor row = client().Pull("sync", key).Get(kTimeout);
  EXPECT_TRUE(at::allclose(row, at::full({1, 2}, 9.0))) << row;
}

// Scenario: a synchronous table's trainer is SIGKILLed before it ends its
// clock. The clock no longer waits for it: worker0's pull goes through, and
// the dead trainer's push, which the shard took, is in the average.
TEST_F(PsTest, AKilledTrainerNoLongerHoldsASynchronousClockBack) {
  expect_clean_exit_ = false;
  StartPs(2, 1, "sync");
  at::Tensor key = at::full({1}, 5, at::kLong);
  client().Push("sync", key, at::ones({1, 2})).Get(kTimeout);
  ASSERT_TRUE(rt().store().Get("ps-test/pushed/3", kTimeout).ok());
  client().Clock().Get(kTimeout);
  children_[2]->Kill();
  at::Tensor row = client().Pull("sync", key).Get(kTimeout);
  EXPECT_TRUE(at::allclose(row, at::full({1, 2}, 2.0))) << row;
}

// Scenario: a trainer pushing as fast as it can is SIGKILLed. Each push it
// made is applied once or, the one in flight, not at all: its own key
// counts what the store says was acknowledged, or one more.
TEST_F(PsTest, ATrainerKilledMidPushLeavesEachPushAppliedOnceOrNotAtAll) {
  expect_clean_exit_ = false;
  StartPs(2, 1, "count_until_killed");
  std::string acked;
  for (;;) {  // until 20 pushes were acknowledged (each Get waits for the key)
    auto got = rt().store().Get("ps-test/acked/3", kTimeout);
    ASSERT_TRUE(got.ok()) << got.status();
    if (std::stoll(*got) >= 20) break;
  }
  children_[2]->Kill();
  ASSERT_NE(children_[2]->Wait(kTimeout), -1);
  const int64_t acknowledged = std::stoll(*rt().store().Get("ps-test/acked/3", kTimeout));
  const float counted =
      client().Pull("counts", at::full({1}, 1003, at::kLong)).Get(kTimeout)[0][0].item<float>();
  EXPECT_GE(counted, acknowledged);
  EXPECT_LE(counted, acknowledged + 1);
  std::printf("acknowledged %lld pushes, counted %.0f\n", static_cast<long long>(acknowledged),
              counted);
}

// Scenario: a server without backups dies. A pull of its shard fails at
// once with the server and the table named, not at its deadline.
TEST_F(PsTest, ADeadServerWithoutBackupsFailsItsShardsCallsNamingIt) {
  expect_clean_exit_ = false;
  StartPs(2, 0, "idle", "", /*backups=*/0);
  children_[1]->Kill();
  ASSERT_NE(children_[1]->Wait(kTimeout), -1);
  auto pulled = client().Pull("dense", at::arange(10, at::kLong)).Wait(kTimeout);
  ASSERT_FALSE(pulled.ok());
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kUnavailable) << pulled.status();
  EXPECT_TRUE(absl::StrContains(pulled.status().message(),
                                "table 'dense' shard 1 on parameter server 'worker2'"))
      << pulled.status();
}

}  // namespace
}  // namespace tessera::testing
