// Checkpoints of the sharded parameter server (see Note [Sharded checkpoints],
// ps/shard_cut.cc): one clock across every shard and table while training
// goes on, written by the servers, restored onto another number of them.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "ps/checkpoint_files.h"
#include "ps/row_store.h"
#include "ps/shard.h"
#include "ps/shard_map.h"
#include "tests/ps/ps_world.h"

namespace tessera::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// A shard made here, in this process, for trainer 0.
std::shared_ptr<ps::Shard> LocalShard(const std::string& table, int64_t index, int64_t shards) {
  auto shard = std::make_shared<ps::Shard>(TestTable(table), index, shards, std::vector<int>{0},
                                           std::make_shared<ps::OpLog>(), nullptr);
  int64_t start = 0;
  EXPECT_TRUE(shard->Hello(ps::Sender{0, 0}, &start).ok());
  return shard;
}

// The rows of `keys` of `table` in `layout`'s checkpoint under `dir`, read
// back onto `shards` shards made here.
at::Tensor Restored(const std::string& dir, const ps::CheckpointLayout& layout,
                    const std::string& table, int64_t shards, const at::Tensor& keys) {
  at::Tensor rows = at::zeros({keys.numel(), TestTable(table).dim});
  auto owner = ps::ShardsOfKeys(TestTable(table), shards, keys);
  EXPECT_TRUE(owner.ok());
  for (int64_t s = 0; s < shards; ++s) {
    auto shard = std::make_shared<ps::Shard>(TestTable(table), s, shards, std::vector<int>{0},
                                             std::make_shared<ps::OpLog>(), nullptr);
    auto restored = ps::RestoreShardCheckpoint(dir, layout, *shard, s, shards, layout.clock);
    EXPECT_TRUE(restored.ok()) << restored.status();
    for (int64_t i = 0; i < keys.numel(); ++i) {
      if ((*owner)[i].item<int64_t>() != s) continue;
      auto row = shard->Pull(ps::Sender{0, 0}, 0, keys.narrow(0, i, 1), absl::InfiniteFuture());
      rows[i] = row.Get(kTimeout)[0];
    }
  }
  return rows;
}

// Scenario (one shard, here): a bounded-staleness table cut at clock 2.
// Trainer 1 runs ahead: its push of clock 2 is taken but held back, and the
// cut is reached only once trainer 0 ends clock 1 too; the rows are then
// the cut's, and released, the held push is applied once. A cut asked at a
// clock already pushed in moves later; one far ahead is refused.
TEST(ShardCutTest, AShardHoldsLaterClocksBackUntilItsCutIsReleased) {
  auto shard = std::make_shared<ps::Shard>(TestTable("ssp"), 0, 1, std::vector<int>{0, 1},
                                           std::make_shared<ps::OpLog>(), nullptr);
  int64_t reached = -1;
  shard->OnCutReached([&reached](int64_t clock) { reached = clock; });
  const ps::Sender zero{0, 0}, one{1, 0};
  int64_t start = 0, sequence = 0;
  const at::Tensor key = at::zeros({1}, at::kLong);
  auto push = [&](const ps::Sender& from, int64_t clock) {
    return shard->Push(from, sequence++, clock, key, at::ones({1, 1})).ok();
  };
  ASSERT_TRUE(shard->Hello(zero, &start).ok());
  ASSERT_TRUE(shard->Hello(one, &start).ok());
  ASSERT_TRUE(push(zero, 0) && push(one, 0) && push(one, 1));
  int64_t agreed = 0;
  // Far past every trainer, or before clock 0: refused (it would hold every push for good).
  for (int64_t wild : {int64_t{1} << 40, int64_t{-3}}) {
    EXPECT_EQ(shard->Cut(wild, &agreed).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ASSERT_TRUE(shard->Cut(1, &agreed).ok());
  EXPECT_EQ(agreed, 2) << "a push of clock 1 was applied already";
  ASSERT_TRUE(shard->Cut(2, &agreed).ok());
  EXPECT_EQ(agreed, 2);
  ASSERT_TRUE(shard->Clock(one, 2).ok());
  ASSERT_TRUE(push(one, 2));  // held back
  ASSERT_TRUE(push(zero, 1));
  EXPECT_EQ(shard->HeldCut(), -1);
  ASSERT_TRUE(shard->Clock(zero, 2).ok());
  EXPECT_EQ(reached, 2);
  EXPECT_EQ(shard->HeldCut(), 2);
  auto read = [&] { return shard->Pull(zero, 0, key, absl::InfiniteFuture()).Get(kTimeout); };
  EXPECT_EQ(read()[0][0].item<float>(), 4);  // clocks 0 and 1 of both
  auto saved = shard->Saved(2);
  ASSERT_TRUE(shard->Release(2, /*written=*/true).ok());
  EXPECT_TRUE(saved.Wait(kTimeout).ok());
  // No cut at clock 3 is pending (one lost with every replica): said at
  // once, not waited for until the caller's deadline.
  EXPECT_EQ(shard->Saved(3).Wait(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard->HeldCut(), -1);
  EXPECT_EQ(read()[0][0].item<float>(), 5);
  ASSERT_TRUE(push(zero, 2));  // no cut pending: applied at once
  EXPECT_EQ(read()[0][0].item<float>(), 6);
  // A cut at 3 holds a push of clock 3 back; moved to 4, the push is the cut's.
  ASSERT_TRUE(shard->Cut(3, &agreed).ok());
  ASSERT_TRUE(push(one, 3));
  EXPECT_EQ(read()[0][0].item<float>(), 6);
  ASSERT_TRUE(shard->Cut(4, &agreed).ok());
  EXPECT_EQ(agreed, 4);
  EXPECT_EQ(read()[0][0].item<float>(), 7);
}

class PsCheckpointTest : public PsWorld {
 protected:
  // Starts `servers` servers under checkpoint_dir_ and trains clocks 0..5,
  // asking for a checkpoint after clock 2: it is cut at clock 4.
  void TrainSixClocksWithACheckpointAtFour(int servers) {
    StartPs(servers, 0, "idle");
    for (int clock = 0; clock < 3; ++clock) ASSERT_TRUE(CheckpointStep(client()).ok());
    Future<int64_t> saved = client().Checkpoint();
    for (int clock = 3; clock < 6; ++clock) ASSERT_TRUE(CheckpointStep(client()).ok());
    auto cut = saved.Wait(kTimeout);
    ASSERT_TRUE(cut.ok()) << cut.status();
    ASSERT_EQ(*cut, 4);
  }
};

// Scenario: two trainers train (a counting table, a bounded-staleness one,
// a synchronous one); worker0 asks for a checkpoint at its third clock and
// trains on. The checkpoint holds every table exactly at its clock c —
// every push of clocks below c, none of later ones (each key: 2c, or c for
// the synchronous average) — though the other trainer ran ahead; read back
// onto three shards it is the same. Meanwhile nothing was lost: the live
// tables count every push, and every replica holds the same bits.
TEST_F(PsCheckpointTest, ACheckpointCutsEveryTableAtOneClockWhileTrainingGoesOn) {
  checkpoint_dir_ = FreshDir("one_clock");
  StartPs(2, 1, "ckpt");
  std::optional<Future<int64_t>> saved;
  for (int clock = 0; clock < kCheckpointClocks; ++clock) {
    if (clock == 2) saved = client().Checkpoint();
    ASSERT_TRUE(CheckpointStep(client()).ok());
  }
  auto cut = saved->Wait(kTimeout);
  ASSERT_TRUE(rt().store().Get("ps-test/pushed/3", kTimeout).ok());  // the other trainer's done
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_GE(*cut, 3);
  EXPECT_LE(*cut, kCheckpointClocks);
  const auto layout = ps::LatestCheckpoint(checkpoint_dir_, TestTables());
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->clock, *cut);
  EXPECT_EQ(layout->shards.at("counts"), 2);
  const at::Tensor keys = at::arange(16, at::kLong);
  const float c = static_cast<float>(*cut);
  for (int64_t shards : {2, 3}) {
    EXPECT_TRUE(at::allclose(Restored(checkpoint_dir_, *layout, "counts", shards, keys),
                             at::full({16, 1}, 2 * c)))
        << shards << " shards";
    EXPECT_TRUE(at::allclose(Restored(checkpoint_dir_, *layout, "ssp", shards, keys),
                             at::full({16, 1}, 2 * c)))
        << shards << " shards";
    EXPECT_TRUE(at::allclose(Restored(checkpoint_dir_, *layout, "sync", shards, keys),
                             at::full({16, 2}, c)))
        << shards << " shards";
  }
  // What was held back at the cut was applied once it was released.
  EXPECT_TRUE(at::allclose(client().Pull("counts", keys).Get(kTimeout),
                           at::full({16, 1}, 2.0 * kCheckpointClocks)));
  ExpectReplicasAgree();
}

// Scenario: a job whose servers start anew under a checkpoint directory
// resumes from its latest complete checkpoint (clock 5, written by two
// shards; one at clock 9 has a shard missing) on three servers: every row
// is the checkpoint's, every trainer starts at clock 5, and the replicas
// agree.
TEST_F(PsCheckpointTest, AJobStartedAnewResumesFromTheLatestCompleteCheckpointOnThreeServers) {
  checkpoint_dir_ = FreshDir("resume");
  const at::Tensor keys = at::arange(64, at::kLong);
  for (int64_t s = 0; s < 2; ++s) {
    for (const ps::TableOptions& table : TestTables()) {
      auto shard = LocalShard(table.name, s, 2);
      at::Tensor mine =
          table.kind == ps::TableKind::kDense ? at::arange(table.rows, at::kLong) : keys;
      auto owner = ps::ShardsOfKeys(table, 2, mine);
      ASSERT_TRUE(owner.ok());
      mine = mine.masked_select(owner->eq(s));
      // Each row moves by its key (SGD, lr -1 or 0.5: a known function).
      at::Tensor grads = mine.to(at::kFloat).unsqueeze(1).expand({mine.numel(), table.dim});
      ASSERT_TRUE(shard->Push(ps::Sender{0, 0}, 0, 0, mine, grads.contiguous()).ok());
      int64_t cut = 0;
      for (int64_t clock : {5, 9}) {
        if (clock == 9 && s == 1) continue;  // an incomplete one
        auto written =
            ps::WriteShardCheckpoint(checkpoint_dir_, table, s, 2, clock, shard->Snapshot(&cut));
        ASSERT_TRUE(written.ok()) << written;
      }
    }
  }
  // The job these files came from: 2 shards, at clocks 9 and 7 by their
  // last records; an hour before, a job of 4 shards got to clock 99.
  ASSERT_TRUE(ps::RecordProgress(checkpoint_dir_, 0, 4, 99).ok());
  const std::string older = checkpoint_dir_ + "/progress/shard-0-of-4";
  std::filesystem::last_write_time(older, std::filesystem::last_write_time(older) -
                                              std::chrono::hours(1));
  ASSERT_TRUE(ps::RecordProgress(checkpoint_dir_, 0, 2, 9).ok());
  ASSERT_TRUE(ps::RecordProgress(checkpoint_dir_, 1, 2, 7).ok());
  const ps::Rollback rollback = ps::RollbackSince(checkpoint_dir_, 5);
  EXPECT_EQ(rollback.shards, 2);
  EXPECT_EQ(rollback.Clocks(), 4) << rollback.ToString();
  EXPECT_EQ(rollback.ToString(),
            "shard 0 of 2 reached clock 9, shard 1 of 2 clock 7: rolled back up to 4 clocks");
  StartPs(3, 0, "idle");
  EXPECT_EQ(client().clock("sync"), 5);
  EXPECT_EQ(client().clock("counts"), 5);
  EXPECT_TRUE(
      at::allclose(client().Pull("counts", keys).Get(kTimeout), keys.to(at::kFloat).unsqueeze(1)));
  // "dense": uniform from its seed, then 0.5 x key taken off.
  at::Tensor dense = client().Pull("dense", at::arange(10, at::kLong)).Get(kTimeout);
  ps::RowStore initial(TestTable("dense"), 0, 1);
  at::Tensor expected = initial.Read(at::arange(10, at::kLong)) -
                        0.5 * at::arange(10).to(at::kFloat).unsqueeze(1).expand({10, 4});
  EXPECT_TRUE(at::allclose(dense, expected)) << dense << expected;
  ASSERT_TRUE(CheckpointStep(client()).ok());
  EXPECT_TRUE(at::allclose(client().Pull("counts", at::arange(16, at::kLong)).Get(kTimeout),
                           at::arange(16).to(at::kFloat).unsqueeze(1) + 1));
  ExpectReplicasAgree();
}

// Scenario: a correlated failure — both servers holding shard 0 are
// SIGKILLed after a checkpoint at clock 4 and two more clocks. The last
// server restores shard 0 from the checkpoint and serves it; the trainer's
// calls wait for that and go on: shard 0's keys count the checkpoint's 4
// clocks and the next one, the other shards' all 7.
TEST_F(PsCheckpointTest, AShardThatLostEveryReplicaComesBackFromTheCheckpoint) {
  expect_clean_exit_ = false;
  checkpoint_dir_ = FreshDir("lost");
  ASSERT_NO_FATAL_FAILURE(TrainSixClocksWithACheckpointAtFour(3));
  const std::vector<std::string> lost = client().shard_map().replicas[0];
  ASSERT_EQ(lost.size(), 2u);
  for (const std::string& server : lost) {
    auto& child = children_[std::stoi(server.substr(6)) - 1];
    child->Kill();
    ASSERT_NE(child->Wait(kTimeout), -1);
  }
  const absl::Status step = CheckpointStep(client());  // clock 6: waits for shard 0 to come back
  ASSERT_TRUE(step.ok()) << step;
  const ps::ShardMap map =
      AwaitShardMap([](const ps::ShardMap& m) { return !m.replicas[0].empty(); });
  EXPECT_NE(map.primary(0), lost[0]);
  EXPECT_NE(map.primary(0), lost[1]);
  const at::Tensor keys = at::arange(16, at::kLong);
  const at::Tensor counts = client().Pull("counts", keys).Get(kTimeout);
  const at::Tensor owner = *ps::ShardsOfKeys(TestTable("counts"), 3, keys);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(counts[i][0].item<float>(), owner[i].item<int64_t>() == 0 ? 5 : 7) << "key " << i;
  }
  ExpectReplicasAgree();
}

// Scenario: every server is lost at once — both SIGKILLed after a
// checkpoint at clock 4 and two more clocks, a push of clock 6 in flight
// (sent while they were paused) — and their launchers restart them,
// holding nothing, under the same names. They restore both shards from
// the checkpoint; the push goes to the restored primary; the trainer
// trains on, its clock ahead of the restored shards' (see Note [Trainers ahead
// of a restored shard]): every key counts the checkpoint's 4 clocks and
// the pushes after the restore, in each kind of table.
TEST_F(PsCheckpointTest, EveryServerLostAndRestartedComesBackFromTheCheckpoint) {
  expect_clean_exit_ = false;
  checkpoint_dir_ = FreshDir("all_lost");
  ASSERT_NO_FATAL_FAILURE(TrainSixClocksWithACheckpointAtFour(2));
  const at::Tensor keys = at::arange(16, at::kLong);
  for (int rank : {1, 2}) ASSERT_EQ(::kill(children_[rank - 1]->pid(), SIGSTOP), 0);
  Future<std::monostate> in_flight = client().Push("counts", keys, at::ones({16, 1}));
  for (int rank : {1, 2}) {
    children_[rank - 1]->Kill();
    ASSERT_NE(children_[rank - 1]->Wait(kTimeout), -1);
  }
  for (int rank : {1, 2}) RestartServer(rank);
  const auto pushed = in_flight.Wait(kTimeout);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_TRUE(client().Clock().Wait(kTimeout).ok());  // ends clock 6
  for (int clock = 7; clock < 10; ++clock) {
    const absl::Status step = CheckpointStep(client());
    ASSERT_TRUE(step.ok()) << "clock " << clock << ": " << step;
    auto sync = client().Pull("sync", keys).Wait(kTimeout);
    ASSERT_TRUE(sync.ok()) << "clock " << clock << ": " << sync.status();
  }
  // The checkpoint's 4, then clock 6's push (counts only), 7, 8 and 9.
  EXPECT_TRUE(at::allclose(client().Pull("counts", keys).Get(kTimeout), at::full({16, 1}, 8.0)))
      << client().Pull("counts", keys).Get(kTimeout);
  EXPECT_TRUE(at::allclose(client().Pull("ssp", keys).Get(kTimeout), at::full({16, 1}, 7.0)))
      << client().Pull("ssp", keys).Get(kTimeout);
  EXPECT_TRUE(at::allclose(client().Pull("sync", keys).Get(kTimeout), at::full({16, 2}, 7.0)))
      << client().Pull("sync", keys).Get(kTimeout);
  ExpectReplicasAgree();
}

// Scenario: the whole job is lost — both servers SIGKILLed at clock 6,
// after a checkpoint at clock 4. What they recorded says how far a job
// started anew from that checkpoint rolls back: each shard had reached
// clock 6, 2 clocks past it (see Note [Progress records]).
TEST_F(PsCheckpointTest, WhatAJobStartedAnewRollsBackIsRecordedByTheJobBeforeIt) {
  expect_clean_exit_ = false;
  checkpoint_dir_ = FreshDir("rollback");
  ASSERT_NO_FATAL_FAILURE(TrainSixClocksWithACheckpointAtFour(2));
  const int64_t cut = 4;
  const std::optional<ps::CheckpointLayout> layout =
      ps::LatestCheckpoint(checkpoint_dir_, TestTables());
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->clock, cut);
  // Recorded within a second of the last clock (a deadline, not a pause).
  const absl::Time deadline = absl::Now() + kTimeout;
  auto recorded = [&] { return ps::RollbackSince(checkpoint_dir_, layout->clock); };
  while (recorded().reached != std::map<int64_t, int64_t>{{0, 6}, {1, 6}} &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (auto& child : children_) {
    child->Kill();
    ASSERT_NE(child->Wait(kTimeout), -1);
  }
  const ps::Rollback rollback = recorded();
  EXPECT_EQ(rollback.shards, 2);
  EXPECT_EQ(rollback.reached, (std::map<int64_t, int64_t>{{0, 6}, {1, 6}}));
  EXPECT_EQ(rollback.Clocks(), 6 - cut) << rollback.ToString();
}

// Scenario (see Note [Client handles], ps/ps_client.h): worker0 asks for a
// checkpoint and drops its client at once, before the shards agreed on the
// cut; its rounds run on without it. A new client of the same trainer ends
// the clock the cut waits for, and the dropped client's future completes
// with the cut and its files. (The rounds held the freed client before:
// ASan's heap-use-after-free in the continuation that asks the shards
// whether they wrote it.)
TEST_F(PsCheckpointTest, AClientDroppedWithACheckpointInFlightLeavesItToFinish) {
  checkpoint_dir_ = FreshDir("dropped");
  StartPs(2, 0, "idle");
  for (int clock = 0; clock < 3; ++clock) ASSERT_TRUE(CheckpointStep(client()).ok());
  Future<int64_t> saved = client().Checkpoint();
  client_.reset();
  ps::PsOptions options = TestPsOptions(2);
  options.checkpoint_dir = checkpoint_dir_;
  auto replacement = ps::PsClient::Connect(rt(), options);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ((*replacement)->clock("counts"), 3);
  ASSERT_TRUE((*replacement)->Clock().Wait(kTimeout).ok());  // ends clock 3: the cut's
  auto cut = saved.Wait(kTimeout);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(*cut, 4);
  const auto layout = ps::LatestCheckpoint(checkpoint_dir_, TestTables());
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->clock, 4);
  EXPECT_TRUE(
      at::allclose(Restored(checkpoint_dir_, *layout, "counts", 2, at::arange(16, at::kLong)),
                   at::full({16, 1}, 3.0)));
}

// Scenario: servers without a checkpoint directory refuse a checkpoint by
// name, and go on serving.
TEST_F(PsCheckpointTest, ServersWithoutACheckpointDirectoryRefuseOneByName) {
  StartPs(2, 0, "idle");
  auto refused = client().Checkpoint().Wait(kTimeout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("checkpoint_dir is empty"), std::string::npos)
      << refused.status();
  EXPECT_TRUE(client().Pull("counts", at::arange(4, at::kLong)).Wait(kTimeout).ok());
}

}  // namespace
}  // namespace tessera::testing
