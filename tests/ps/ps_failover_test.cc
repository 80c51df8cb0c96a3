// Replicated parameter-server shards across real processes (see Note
// [Parameter-server replication], ps/ps_server.h): two servers, each the
// primary of one shard and the backup of the other, two child trainers and
// the test process pushing a counting table. Replicas hold the same bits;
// a primary SIGKILLed or paused mid-push is replaced by its backup, the
// trainers' calls follow it, every acknowledged push is counted once, and a
// paused primary that wakes is refused by name.
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ps/ps_messages.h"
#include "rpc/internal_service.h"
#include "tests/ps/ps_world.h"

namespace tessera::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);
// The child processes: worker1 and worker2 serve, worker3 and worker4 train.
constexpr int kWorker1 = 0, kFirstTrainer = 3;

// A key of "counts" that shard 0 holds.
at::Tensor KeyOfShard0() {
  ps::TableOptions counts = TestTables()[0];
  for (int64_t key = 0;; ++key) {
    at::Tensor keys = at::full({1}, key, at::kLong);
    if (ps::ShardsOfKeys(counts, 2, keys)->item<int64_t>() == 0) return keys;
  }
}

class PsFailoverTest : public PsWorld {};

// Scenario: trainers push to every table, synchronous ones included. Each
// shard's primary and backup made the same changes, and hold the same bits.
TEST_F(PsFailoverTest, EveryReplicaOfEveryShardHoldsTheSameBits) {
  StartPs(2, 2, "count");
  const at::Tensor keys = at::arange(10, at::kLong);
  for (int step = 0; step < 5; ++step) {
    client().Push("dense", keys, at::ones({10, 4})).Get(kTimeout);
    client().Push("sync", keys, at::ones({10, 2})).Get(kTimeout);
    client().Push("ssp", keys, at::ones({10, 1})).Get(kTimeout);
    client().Clock().Get(kTimeout);
  }
  ExpectCountsOfEveryPush();
  for (const ps::TableOptions& table : TestTables()) {
    for (int64_t shard = 0; shard < 2; ++shard) {
      const auto digests = Digests(table.name, shard);
      ASSERT_EQ(digests.size(), 2u);
      EXPECT_GT(digests[0][0], 0) << "no change made";
      EXPECT_EQ(digests[0][0], digests[1][0]) << table.name << " shard " << shard << ": changes";
      EXPECT_EQ(digests[0][1], digests[1][1]) << table.name << " shard " << shard << ": digests";
      EXPECT_EQ(digests[0][2], digests[1][2]) << table.name << " shard " << shard << ": rows";
    }
  }
}

// Scenario: shard 0's primary is SIGKILLed while the trainers push. Its
// backup takes over; the trainers' calls in flight go to it; every push
// made is counted once, and no trainer failed.
TEST_F(PsFailoverTest, AKilledPrimaryLosesNoAcknowledgedPushAndAppliesNoneTwice) {
  expect_clean_exit_ = false;
  StartPs(2, 2, "count");
  AwaitRound(kFirstTrainer, 10);
  children_[kWorker1]->Kill();
  ASSERT_NE(children_[kWorker1]->Wait(kTimeout), -1);
  ExpectCountsOfEveryPush(/*sent_again=*/true);
  const ps::ShardMap map = client().shard_map();
  EXPECT_EQ(map.replicas[0], std::vector<std::string>{"worker2"}) << map.Encode();
  EXPECT_EQ(map.replicas[1], std::vector<std::string>{"worker2"}) << map.Encode();
}

// Scenario: shard 0's primary is paused (SIGSTOP) past the failure timeout
// while the trainers push, and continued once its backup took over. The
// trainers never notice but as time; the woken primary refuses to serve
// as shard 0's primary, naming itself, the epoch and the new primary (and
// then joins the shards anew as a backup).
TEST_F(PsFailoverTest, APausedPrimaryIsReplacedAndFencedWhenItWakes) {
  expect_clean_exit_ = false;
  StartPs(2, 2, "count");
  AwaitRound(kFirstTrainer, 10);
  const pid_t paused = children_[kWorker1]->pid();
  ASSERT_EQ(::kill(paused, SIGSTOP), 0);
  // Woken however the test ends: a paused process would hold the job's
  // shutdown until its liveness probes give up.
  struct Continue {
    pid_t pid;
    ~Continue() { ::kill(pid, SIGCONT); }
  } woken{paused};
  // Pulls until one is served by the new primary: the client follows the
  // shard map (a first pull may still be answered before the signal lands).
  const at::Tensor key = KeyOfShard0();
  while (client().shard_map().primary(0) != "worker2") client().Pull("counts", key).Get(kTimeout);
  const ps::ShardMap map = client().shard_map();
  ASSERT_EQ(::kill(paused, SIGCONT), 0);

  const ps::PullRequest stale{{"counts"}, /*epoch=*/1, /*shard=*/0, {0}, {key}};
  auto refused =
      rt().CallAsync("worker1", ps::services::kPull, rpc::EncodeMessage(stale)).Wait(kTimeout);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted) << refused.status();
  for (const std::string& named :
       {std::string("parameter server 'worker1'"), std::string("'worker2'")}) {
    EXPECT_TRUE(absl::StrContains(refused.status().message(), named)) << refused.status();
  }
  // The epoch it names: the map that replaced it, or a later one (woken,
  // it drops its replicas and may have joined anew as a backup).
  const std::string message(refused.status().message());
  const size_t at = message.find("epoch ");
  ASSERT_NE(at, std::string::npos) << message;
  EXPECT_GE(std::atoll(message.c_str() + at + 6), map.epoch) << message;
  ExpectCountsOfEveryPush(/*sent_again=*/true);
  AwaitShardMap([](const ps::ShardMap& m) {
    return m.HoldsReplica(0, "worker1") && m.HoldsReplica(1, "worker1");
  });
  ExpectReplicasAgree();
}

// Scenario: shard 0's primary is SIGKILLed while the trainers push, and
// restarted (as its launcher would) once its backup took over. The new
// incarnation holds nothing; it joins both shards as their backup — a copy
// of each table, then the changes made meanwhile — while worker0 goes on
// pushing. Then every replica of every shard holds the same bits, and every
// push is counted once.
TEST_F(PsFailoverTest, ARestartedServerJoinsAsABackupWhileTrainersPush) {
  expect_clean_exit_ = false;
  StartPs(2, 2, "count");
  AwaitRound(kFirstTrainer, 10);
  children_[kWorker1]->Kill();
  ASSERT_NE(children_[kWorker1]->Wait(kTimeout), -1);
  AwaitShardMap([](const ps::ShardMap& m) { return m.primary(0) == "worker2"; });
  RestartServer(1);
  const at::Tensor keys = at::arange(10, at::kLong);
  auto rejoined = [](const ps::ShardMap& m) {
    return m.HoldsReplica(0, "worker1") && m.HoldsReplica(1, "worker1");
  };
  int pushes = 0;
  for (; !rejoined(AwaitShardMap([](const ps::ShardMap&) { return true; })); ++pushes) {
    ASSERT_TRUE(client().Push("dense", keys, at::ones({10, 4})).Wait(kTimeout).ok());
    ASSERT_LT(pushes, 100000) << "worker1 never joined";
  }
  for (int i = 0; i < 5; ++i) {  // after the join: these reach the new backup as changes
    ASSERT_TRUE(client().Push("dense", keys, at::ones({10, 4})).Wait(kTimeout).ok());
  }
  std::printf("worker0 pushed %d times while worker1 joined\n", pushes);
  ExpectCountsOfEveryPush(/*sent_again=*/true);
  const ps::ShardMap map = AwaitShardMap(rejoined);
  EXPECT_EQ(map.replicas[0], (std::vector<std::string>{"worker2", "worker1"})) << map.Encode();
  EXPECT_EQ(map.replicas[1], (std::vector<std::string>{"worker2", "worker1"})) << map.Encode();
  ExpectReplicasAgree();
}

// Scenario: a server restarted into an idle job (no trainer pushes: they
// finished, or wait) joins both shards as their backup. Its primary is idle
// and heartbeats nobody, yet it says so to the new backup: two failure
// timeouts later the map is the one the join made — nobody took its
// primary's silence for a failure (before, the new backup took both shards
// over 3 s after joining, and the job went on joining and taking over).
TEST_F(PsFailoverTest, AServerJoiningAnIdleJobTakesNothingOver) {
  expect_clean_exit_ = false;
  StartPs(2, 0, "idle");
  ASSERT_TRUE(
      client().Push("dense", at::arange(10, at::kLong), at::ones({10, 4})).Wait(kTimeout).ok());
  children_[kWorker1]->Kill();
  ASSERT_NE(children_[kWorker1]->Wait(kTimeout), -1);
  AwaitShardMap([](const ps::ShardMap& m) { return m.primary(0) == "worker2"; });
  // The restart comes once the new primary went idle (it heartbeats for
  // half a failure timeout after its promotion), as a woken zombie's does.
  absl::SleepFor(TestPsOptions().failure_timeout);
  RestartServer(1);
  const ps::ShardMap joined = AwaitShardMap([](const ps::ShardMap& m) {
    return m.HoldsReplica(0, "worker1") && m.HoldsReplica(1, "worker1");
  });
  // The window in which a false failover would happen, not a wait for one.
  absl::SleepFor(2 * TestPsOptions().failure_timeout);
  const ps::ShardMap after = AwaitShardMap([](const ps::ShardMap&) { return true; });
  EXPECT_EQ(after.epoch, joined.epoch) << after.Encode();
  EXPECT_EQ(after.primary(0), "worker2") << after.Encode();
  EXPECT_EQ(after.primary(1), "worker2") << after.Encode();
  ExpectReplicasAgree();
}

// Scenario: worker1 is SIGKILLed and not restarted, as when its machine is
// lost for good; a server added to the running job (ps::PsServer::Join, a
// rank beyond the world's) joins both shards, short of their backup, while
// worker0 pushes. Then worker2 is SIGKILLed too: the added server, the last
// replica of both shards, serves them, and every push is counted once.
TEST_F(PsFailoverTest, AServerAddedToARunningJobTakesALostServersPlace) {
  expect_clean_exit_ = false;
  StartPs(2, 2, "count");
  AwaitRound(kFirstTrainer, 10);
  children_[kWorker1]->Kill();
  ASSERT_NE(children_[kWorker1]->Wait(kTimeout), -1);
  AwaitShardMap([](const ps::ShardMap& m) {
    return m.replicas[0] == std::vector<std::string>{"worker2"} &&
           m.replicas[1] == std::vector<std::string>{"worker2"};
  });
  const std::string added = absl::StrCat("worker", AddServer());
  auto joined = [&added](const ps::ShardMap& m) {
    return m.HoldsReplica(0, added) && m.HoldsReplica(1, added);
  };
  const at::Tensor keys = at::arange(10, at::kLong);
  int pushes = 0;
  for (; !joined(AwaitShardMap([](const ps::ShardMap&) { return true; })); ++pushes) {
    ASSERT_TRUE(client().Push("dense", keys, at::ones({10, 4})).Wait(kTimeout).ok());
    ASSERT_LT(pushes, 100000) << added << " never joined";
  }
  std::printf("worker0 pushed %d times while %s joined\n", pushes, added.c_str());
  ExpectCountsOfEveryPush(/*sent_again=*/true);
  const ps::ShardMap map = AwaitShardMap(joined);
  EXPECT_EQ(map.servers, (std::vector<std::string>{"worker1", "worker2", added})) << map.Encode();
  ExpectReplicasAgree();

  const at::Tensor counts = client().Pull("counts", at::arange(64, at::kLong)).Get(kTimeout);
  children_[1]->Kill();  // worker2
  ASSERT_NE(children_[1]->Wait(kTimeout), -1);
  EXPECT_TRUE(client().Pull("counts", at::arange(64, at::kLong)).Get(kTimeout).equal(counts));
  for (int64_t shard : {0, 1}) EXPECT_EQ(client().shard_map().primary(shard), added);
}

// Scenario: three servers, two backups a shard; shard 0's primary is
// SIGKILLed while the trainers push. Its first backup takes over, and keeps
// the other backup if that one made the same changes (one that missed a
// change the dead primary sent is taken out of that shard). Every push is counted once; every shard ends on both live servers (a
// backup taken out joins anew), whose replicas hold the same bits.
TEST_F(PsFailoverTest, WithTwoBackupsTheReplicasLeftStillAgree) {
  expect_clean_exit_ = false;
  StartPs(3, 2, "count", "", /*backups=*/2);
  AwaitRound(4, 10);  // the first trainer: worker4
  children_[kWorker1]->Kill();
  ASSERT_NE(children_[kWorker1]->Wait(kTimeout), -1);
  ExpectCountsOfEveryPush(/*sent_again=*/true);
  // A backup taken out for missing a change the dead primary sent joins
  // anew: every shard ends on both live servers.
  const ps::ShardMap map = AwaitShardMap([](const ps::ShardMap& m) {
    for (int64_t shard = 0; shard < m.shards(); ++shard) {
      if (!m.HoldsReplica(shard, "worker2") || !m.HoldsReplica(shard, "worker3")) return false;
    }
    return true;
  });
  EXPECT_EQ(map.primary(0), "worker2") << map.Encode();
  for (int64_t shard = 0; shard < 3; ++shard) {
    EXPECT_EQ(map.replicas[shard].size(), 2u) << map.Encode();
  }
  ExpectReplicasAgree();
  std::printf("after the kill:\n%s\n", map.Encode().c_str());
}

}  // namespace
}  // namespace tessera::testing
