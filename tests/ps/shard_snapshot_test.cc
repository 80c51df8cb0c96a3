// A shard's snapshot (ps/shard_snapshot.h) and how a new backup uses it
// (ps/server_join.cc): restored, it holds the same bits; taken table by
// table while the primary goes on changing them, then followed by the
// changes made meanwhile, every change is made once on the new replica.
// In one process: the shards and logs, no network (ps_failover_test joins
// a restarted server across processes).
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/deadline_timer.h"
#include "ps/op_log.h"
#include "ps/shard.h"
#include "ps/shard_map.h"

namespace tessera::ps {
namespace {

constexpr int64_t kShards = 2;

std::vector<TableOptions> Tables() {
  TableOptions adam = TableOptions::Sparse("adam", 3);
  adam.optimizer = OptimizerOptions::Adam(0.1);
  adam.init = Initializer::Uniform(-1, 1, 7);
  TableOptions sync = TableOptions::Sparse("sync", 2);
  sync.optimizer = OptimizerOptions::Adagrad(0.5);
  sync.consistency = Consistency::Synchronous();
  TableOptions dense = TableOptions::Dense("dense", 40, 4);
  dense.optimizer = OptimizerOptions::Sgd(0.2);
  return {adam, sync, dense};
}

// Shard 0's keys of a sparse table among 0..n-1 (dense: its range's first ones).
at::Tensor KeysOfShard0(const TableOptions& table, int64_t n) {
  at::Tensor all = at::arange(n, at::kLong);
  at::Tensor shards = *ShardsOfKeys(table, kShards, all);
  return all.masked_select(shards.eq(0));
}

// One replica of shard 0: every table on one log.
struct Replica {
  std::shared_ptr<OpLog> log = std::make_shared<OpLog>();
  std::vector<std::shared_ptr<Shard>> tables;
  explicit Replica(DeadlineTimer* timer, std::vector<int> trainers = {1, 2}) {
    for (const TableOptions& table : Tables()) {
      tables.push_back(std::make_shared<Shard>(table, 0, kShards, trainers, log, timer));
    }
  }
};

// A change the primary made, as its backups get it.
struct Change {
  size_t table;
  int64_t lsn;
  ShardOp op;
};

// Makes `op` on the primary's `table`; records it if it changed anything.
void Make(Replica& primary, size_t table, ShardOp op, std::vector<Change>* made) {
  Shard& shard = *primary.tables[table];
  absl::StatusOr<Logged> logged;
  int64_t start = 0;
  switch (op.kind) {
    case ShardOp::Kind::kPush:
      logged = shard.Push(op.from, op.sequence, op.clock, op.keys, op.grads);
      break;
    case ShardOp::Kind::kClock:
      logged = shard.Clock(op.from, op.clock);
      break;
    case ShardOp::Kind::kHello:
      logged = shard.Hello(op.from, &start);
      break;
    case ShardOp::Kind::kGone:
      logged = shard.TrainerGone(op.from.rank, op.from.incarnation);
      break;
    case ShardOp::Kind::kCut:
      logged = shard.Cut(op.clock, &start);
      break;
    case ShardOp::Kind::kRelease:
      logged = shard.Release(op.clock, op.sequence != 0);
      break;
  }
  ASSERT_TRUE(logged.ok()) << logged.status();
  if (logged->is_new) made->push_back({table, logged->lsn, std::move(op)});
}

// A round of changes to every table: each trainer pushes, then clocks.
void Round(Replica& primary, int round, std::vector<Change>* made) {
  const std::vector<TableOptions> tables = Tables();
  for (size_t t = 0; t < tables.size(); ++t) {
    at::Tensor keys = KeysOfShard0(tables[t], 12).narrow(0, round % 2, 3);
    for (int rank : {1, 2}) {
      at::Tensor grads = at::full({keys.numel(), tables[t].dim}, 0.1F * (rank + round));
      Make(primary, t, ShardOp{ShardOp::Kind::kPush, Sender{rank, 0}, round, round, keys, grads},
           made);
    }
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    for (int rank : {1, 2}) {
      Make(primary, t, ShardOp{ShardOp::Kind::kClock, Sender{rank, 0}, 0, round + 1, {}, {}}, made);
    }
  }
}

// Scenario: a shard that took pushes from two trainers, one of them sent
// again, with a synchronous clock still open, a late trainer gone and a
// checkpoint's cut holding a push back (ps/shard_cut.cc). Restored
// from its snapshot, a new shard holds the same bits, and takes the same
// next change to the same bits.
TEST(ShardSnapshotTest, ARestoredShardHoldsTheSameBitsAndTakesTheSameChanges) {
  DeadlineTimer timer;
  Replica primary(&timer), copy(&timer, {});
  std::vector<Change> made;
  for (int round = 0; round < 3; ++round) Round(primary, round, &made);
  const TableOptions sync = Tables()[1];
  const at::Tensor keys = KeysOfShard0(sync, 12).narrow(0, 0, 2);
  Make(primary, 1, ShardOp{ShardOp::Kind::kPush, Sender{1, 0}, 9, 3, keys, at::ones({2, 2})},
       &made);  // clock 3: aggregated, not yet applied
  Make(primary, 1, ShardOp{ShardOp::Kind::kPush, Sender{1, 0}, 9, 3, keys, at::ones({2, 2})},
       &made);  // sent again
  Make(primary, 0, ShardOp{ShardOp::Kind::kHello, Sender{3, 0}, 0, 0, {}, {}}, &made);
  Make(primary, 0, ShardOp{ShardOp::Kind::kGone, Sender{3, 0}, 0, 0, {}, {}}, &made);
  // A checkpoint's cut pending at clock 5, and a push past it held back.
  Make(primary, 0, ShardOp{ShardOp::Kind::kCut, {}, 0, 5, {}, {}}, &made);
  const at::Tensor held = KeysOfShard0(Tables()[0], 12).narrow(0, 0, 2);
  Make(primary, 0, ShardOp{ShardOp::Kind::kPush, Sender{2, 0}, 10, 5, held, at::ones({2, 3})},
       &made);
  for (size_t t = 0; t < primary.tables.size(); ++t) {
    int64_t cut = 0;
    const ShardSnapshot snapshot = primary.tables[t]->Snapshot(&cut);
    EXPECT_EQ(cut, primary.log->last());
    ASSERT_TRUE(copy.tables[t]->Restore(snapshot, cut).ok());
    EXPECT_EQ(copy.tables[t]->Digest(), primary.tables[t]->Digest()) << Tables()[t].name;
    const ShardStats a = primary.tables[t]->Stats(), b = copy.tables[t]->Stats();
    EXPECT_EQ(a.rows, b.rows);
    EXPECT_EQ(a.pushes_applied, b.pushes_applied);
    EXPECT_EQ(a.duplicates, b.duplicates);
    EXPECT_EQ(a.clock, b.clock);
  }
  std::vector<Change> next;
  Round(primary, 3, &next);
  copy.log->StartAt(made.back().lsn);
  for (const Change& change : next) {
    ASSERT_TRUE(copy.tables[change.table]->Replay(change.op, change.lsn).ok());
  }
  for (size_t t = 0; t < primary.tables.size(); ++t) {
    EXPECT_EQ(copy.tables[t]->Digest(), primary.tables[t]->Digest()) << Tables()[t].name;
  }
}

// Scenario: a snapshot sent in parts of two rows (ShardSnapshot::Rows),
// then the rest (WithoutRows), as a joiner gets a large shard: restored,
// the same bits. A part out of order is refused.
TEST(ShardSnapshotTest, ASnapshotRestoredInPartsHoldsTheSameBits) {
  DeadlineTimer timer;
  Replica primary(&timer), copy(&timer, {});
  std::vector<Change> made;
  for (int round = 0; round < 3; ++round) Round(primary, round, &made);
  for (size_t t = 0; t < primary.tables.size(); ++t) {
    int64_t cut = 0;
    const ShardSnapshot snapshot = primary.tables[t]->Snapshot(&cut);
    ASSERT_GT(snapshot.rows(), 2);
    if (Tables()[t].kind == TableKind::kSparse) {
      Replica other(&timer, {});
      EXPECT_EQ(other.tables[t]->Restore(snapshot.Rows(2, 1), 2, false, cut).code(),
                absl::StatusCode::kInvalidArgument)
          << "rows 2.. before rows 0..1";
    }
    for (int64_t first = 0; first < snapshot.rows(); first += 2) {
      const int64_t n = std::min<int64_t>(2, snapshot.rows() - first);
      ASSERT_TRUE(copy.tables[t]->Restore(snapshot.Rows(first, n), first, false, cut).ok());
    }
    ASSERT_TRUE(copy.tables[t]->Restore(snapshot.WithoutRows(), snapshot.rows(), true, cut).ok());
    EXPECT_EQ(copy.tables[t]->Digest(), primary.tables[t]->Digest()) << Tables()[t].name;
  }
}

// Scenario: a snapshot of 100,000 rows (several parts under the lock)
// taken while another thread pushes on: the snapshot holds the shard as it
// was at its cut — a row pushed before the copy reached it was copied
// first — so restored, then followed by the pushes after the cut, it holds
// the primary's bits.
TEST(ShardSnapshotTest, ASnapshotTakenWhilePushesGoOnIsTheShardAtItsCut) {
  DeadlineTimer timer;
  Replica primary(&timer), copy(&timer, {});
  const TableOptions adam = Tables()[0];
  const at::Tensor keys = KeysOfShard0(adam, 200000);
  const int64_t n = keys.numel();
  std::vector<Change> made;
  Make(primary, 0, ShardOp{ShardOp::Kind::kPush, Sender{1, 0}, 0, 0, keys, at::ones({n, 3})},
       &made);
  std::atomic<int> pushes{0};
  std::atomic<bool> stop{false};
  std::vector<Change> during;
  std::thread pusher([&] {
    for (int64_t sequence = 1; !stop.load(); ++sequence) {
      const at::Tensor some = keys.narrow(0, (sequence * 7919) % (n - 64), 64);
      Make(primary, 0,
           ShardOp{ShardOp::Kind::kPush, Sender{2, 0}, sequence, 0, some, at::ones({64, 3})},
           &during);
      ++pushes;
    }
  });
  while (pushes.load() < 10) std::this_thread::yield();  // the pusher is under way
  int64_t cut = 0;
  const ShardSnapshot snapshot = primary.tables[0]->Snapshot(&cut);
  const int during_snapshot = pushes.load();
  // A few after it too: there are pushes after the cut to replay, however
  // the threads were scheduled.
  while (pushes.load() < during_snapshot + 5) std::this_thread::yield();
  stop = true;
  pusher.join();
  ASSERT_TRUE(copy.tables[0]->Restore(snapshot, cut).ok());
  int replayed = 0;
  for (const Change& change : during) {
    if (change.lsn <= cut) continue;
    ASSERT_TRUE(copy.tables[0]->Replay(change.op, change.lsn).ok());
    ++replayed;
  }
  EXPECT_GT(replayed, 0);
  EXPECT_EQ(copy.tables[0]->Digest(), primary.tables[0]->Digest());
  std::printf("%lld rows; %d pushes before the snapshot ended, %d after its cut\n",
              static_cast<long long>(n), during_snapshot, replayed);
}

// Scenario: the join's protocol, in one process. The primary notes its last
// change (`start`) and from then on sends the joiner every change; it takes
// each table's snapshot while changes go on, so each has its own cut. The
// joiner's log holds the changes back until every table is restored, then
// follows from `start`: a change a table's snapshot holds is skipped, the
// rest made once. Both replicas then hold the same bits.
TEST(ShardSnapshotTest, AJoinerFollowingFromItsSnapshotsMakesEveryChangeOnce) {
  DeadlineTimer timer;
  Replica primary(&timer), joiner(&timer, {});
  joiner.log->Hold();
  std::vector<Change> before, sent;
  for (int round = 0; round < 2; ++round) Round(primary, round, &before);
  const int64_t start = primary.log->last();
  std::vector<std::pair<ShardSnapshot, int64_t>> snapshots;
  for (size_t t = 0; t < primary.tables.size(); ++t) {
    Round(primary, 2 + static_cast<int>(t), &sent);  // changes between the cuts
    int64_t cut = 0;
    ShardSnapshot snapshot = primary.tables[t]->Snapshot(&cut);
    snapshots.emplace_back(std::move(snapshot), cut);
  }
  ASSERT_LT(start, snapshots.front().second);
  ASSERT_LT(snapshots.front().second, snapshots.back().second);
  Round(primary, 9, &sent);  // after every cut
  // The changes arrive, the last first, before any snapshot: held back.
  std::vector<Future<std::monostate>> applied;
  for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
    std::shared_ptr<Shard> shard = joiner.tables[it->table];
    ShardOp op = it->op;
    const int64_t lsn = it->lsn;
    applied.push_back(
        joiner.log->Follow(1, lsn, [shard, op, lsn] { return shard->Replay(op, lsn); }));
  }
  EXPECT_EQ(joiner.log->last(), 0) << "a change was made before the snapshots";
  for (size_t t = 0; t < joiner.tables.size(); ++t) {
    ASSERT_TRUE(joiner.tables[t]->Restore(snapshots[t].first, snapshots[t].second).ok());
  }
  joiner.log->StartAt(start);
  for (auto& done : applied) ASSERT_TRUE(done.Wait(absl::ZeroDuration()).ok());
  EXPECT_EQ(joiner.log->last(), primary.log->last());
  for (size_t t = 0; t < primary.tables.size(); ++t) {
    EXPECT_EQ(joiner.tables[t]->Digest(), primary.tables[t]->Digest()) << Tables()[t].name;
  }
}

// Scenario: snapshots that are not this shard's, or do not hold together,
// as a hostile or broken sender could send: each refused with
// InvalidArgument naming the table, before anything changes.
// Scenario (a primary's log): a joiner confirmed changes up to 3 while it
// caught up, before the map named it a backup. Named one, the primary
// waits only for what it has not confirmed: change 3 is replicated at once
// (before, every wait stalled until the joiner's next answer: up to a
// heartbeat, 150 ms), change 4 once it confirms it. A backup that left
// starts from nothing when named again.
TEST(OpLogTest, WhatAJoinerConfirmedBeforeItWasNamedABackupCounts) {
  OpLog log;
  for (int i = 0; i < 4; ++i) log.Next();
  log.Confirm("joiner", 3);
  log.SetBackups({"joiner"});
  EXPECT_TRUE(log.Replicated(3).IsReady());
  Future<std::monostate> fourth = log.Replicated(4);
  EXPECT_FALSE(fourth.IsReady());
  log.Confirm("joiner", 4);
  EXPECT_TRUE(fourth.IsReady());
  log.SetBackups({});
  log.SetBackups({"joiner"});
  EXPECT_FALSE(log.Replicated(1).IsReady());
}

TEST(ShardSnapshotTest, ASnapshotThatDoesNotFitIsRefusedNamingWhy) {
  DeadlineTimer timer;
  Replica primary(&timer);
  std::vector<Change> made;
  Round(primary, 0, &made);
  int64_t cut = 0;
  const ShardSnapshot good = primary.tables[0]->Snapshot(&cut);
  auto refused = [&](ShardSnapshot snapshot, const std::string& why) {
    Replica fresh(&timer, {});
    const absl::Status status = fresh.tables[0]->Restore(snapshot, cut);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << why << ": " << status;
    EXPECT_NE(status.message().find("'adam'"), std::string::npos) << why << ": " << status;
  };
  ShardSnapshot other_shard = good;
  const at::Tensor all = at::arange(40, at::kLong);
  other_shard.keys = all.masked_select(ShardsOfKeys(Tables()[0], kShards, all)->eq(1))
                         .narrow(0, 0, good.keys.numel());
  refused(other_shard, "keys of shard 1");
  ShardSnapshot twice = good;
  twice.keys = good.keys.clone();
  twice.keys[1] = twice.keys[0];
  refused(twice, "a key twice");
  ShardSnapshot narrow = good;
  narrow.values = good.values.narrow(1, 0, 2).contiguous();
  refused(narrow, "rows too narrow");
  ShardSnapshot few_states = good;
  few_states.optimizer.pop_back();
  refused(few_states, "optimizer state missing");
  ShardSnapshot counts = good;
  counts.trainers.back() = 1000;  // more sequences than carried
  refused(counts, "a trainer's count");
  ShardSnapshot cut_short = good;
  cut_short.trainers.pop_back();
  refused(cut_short, "a trainer cut short");
}

}  // namespace
}  // namespace tessera::ps
