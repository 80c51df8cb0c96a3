// libFuzzer target for what a parameter server's shard takes from a trainer
// (ps/shard.h, ps/row_store.h): the typed fields of its requests — tensors of
// any type and shape, any keys, clocks and sequences — in any order, from
// any rank and incarnation. Each input drives fresh shards of a sparse and a
// dense table, synchronous, bounded and asynchronous; whatever came, a
// proper request is served after it. Each shard has a backup that replays
// every change the shard made (Shard::Replay): it must take each, and end
// with the same digest — and a fresh replica restored from its snapshot
// too. Checkpoint cuts and releases at any clock come between them
// (their held-back pushes are in the snapshot). Snapshots of any fields (what a joiner's
// InstallRequest carries) are refused or restored, never a crash. (The bytes before the fields —
// the envelope and the values — are codec_fuzzer's.) Input: a sequence of ops, each [op byte][rank
// byte][pieces...].
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ps/shard.h"
#include "ps/shard_map.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using tessera::ps::Logged;
using tessera::ps::Shard;
using tessera::ps::ShardOp;

int64_t Number(std::string_view piece) {
  int64_t value = 0;
  std::memcpy(&value, piece.data(), std::min(piece.size(), sizeof(value)));
  return value;
}

// A tensor from a piece: [type][dims][size...][bytes], at most 64 per side.
at::Tensor TensorFrom(std::string_view piece) {
  static const at::ScalarType kTypes[] = {at::kLong, at::kFloat, at::kInt, at::kDouble, at::kByte};
  if (piece.size() < 2) return at::Tensor();
  const at::ScalarType type = kTypes[static_cast<uint8_t>(piece[0]) % 5];
  const int dims = static_cast<uint8_t>(piece[1]) % 3;
  piece.remove_prefix(2);
  std::vector<int64_t> sizes;
  for (int d = 0; d < dims; ++d) {
    sizes.push_back(piece.empty() ? 0 : static_cast<uint8_t>(piece[0]) % 65);
    if (!piece.empty()) piece.remove_prefix(1);
  }
  at::Tensor tensor = at::zeros(sizes, at::TensorOptions().dtype(type));
  const size_t bytes = std::min(piece.size(), tensor.nbytes());
  if (bytes > 0) std::memcpy(tensor.data_ptr(), piece.data(), bytes);
  return tensor;
}

std::vector<tessera::ps::TableOptions> Tables() {
  using tessera::ps::Consistency;
  auto sync = tessera::ps::TableOptions::Sparse("sync", 4);
  sync.consistency = Consistency::Synchronous();
  auto bounded = tessera::ps::TableOptions::Dense("bounded", 100, 4);
  bounded.consistency = Consistency::Bounded(2);
  bounded.optimizer = tessera::ps::OptimizerOptions::Adam(0.1);
  auto hogwild = tessera::ps::TableOptions::Sparse("async", 4);
  hogwild.optimizer = tessera::ps::OptimizerOptions::Adagrad(0.1);
  return {sync, bounded, hogwild};
}

std::shared_ptr<Shard> Fresh(const tessera::ps::TableOptions& table) {
  return std::make_shared<Shard>(table, 0, 2, std::vector<int>{},
                                 std::make_shared<tessera::ps::OpLog>(), nullptr);
}

// A piece as int64s (what is left over a multiple of 8 bytes is dropped).
std::vector<int64_t> Ints(std::string_view piece) {
  std::vector<int64_t> ints(piece.size() / sizeof(int64_t));
  if (!ints.empty()) std::memcpy(ints.data(), piece.data(), ints.size() * sizeof(int64_t));
  return ints;
}

// A snapshot as a joiner could be sent one (InstallRequest): any tensors,
// any counts.
tessera::ps::ShardSnapshot SnapshotFrom(tessera::fuzz::Pieces& input) {
  tessera::ps::ShardSnapshot s;
  s.keys = TensorFrom(input.Next());
  s.values = TensorFrom(input.Next());
  const int states = input.Next().size() % 4;
  for (int i = 0; i < states; ++i) s.optimizer.push_back(TensorFrom(input.Next()));
  s.trainers = Ints(input.Next());
  s.sequences_above = Ints(input.Next());
  s.counters = Ints(input.Next());
  s.aggregates = Ints(input.Next());
  s.aggregate_pushers = Ints(input.Next());
  const int pushes = input.Next().size() % 3;
  for (int i = 0; i < pushes; ++i) {
    s.aggregate_keys.push_back(TensorFrom(input.Next()));
    s.aggregate_grads.push_back(TensorFrom(input.Next()));
  }
  return s;
}

// Restored on a fresh replica, `shard`'s snapshot holds its bits.
void ExpectSnapshotRoundTrips(Shard& shard) {
  int64_t cut = 0;
  const tessera::ps::ShardSnapshot snapshot = shard.Snapshot(&cut);
  auto copy = Fresh(shard.table());
  if (!copy->Restore(snapshot, cut).ok() || copy->Digest() != shard.Digest()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::shared_ptr<Shard>> shards, backups;
  for (const auto& table : Tables()) {
    for (auto* replicas : {&shards, &backups}) {
      replicas->push_back(std::make_shared<Shard>(table, 0, 2, std::vector<int>{1, 2},
                                                  std::make_shared<tessera::ps::OpLog>(), nullptr));
    }
  }
  tessera::fuzz::Pieces input(data, size);
  while (!input.empty()) {
    const std::string_view head = input.Next();
    if (head.size() < 3) break;
    const size_t which = static_cast<uint8_t>(head[0]) % shards.size();
    Shard& shard = *shards[which];
    const tessera::ps::Sender from{static_cast<uint8_t>(head[1]) % 4,
                                   static_cast<uint8_t>(head[2]) % 3};
    ShardOp op{ShardOp::Kind::kHello, from, 0, 0, {}, {}};
    absl::StatusOr<Logged> logged = Logged{};
    int64_t start = 0;
    const int kind = (static_cast<uint8_t>(head[0]) / 3) % 8;
    if (kind == 7) {
      // A snapshot of a hostile or broken sender: refused, or restored and
      // then a snapshot like any other.
      auto joiner = Fresh(shard.table());
      const bool last = (head[1] & 1) != 0;
      const int64_t first_row = Number(input.Next()) % 4;  // a part's place, in range or not
      if (joiner->Restore(SnapshotFrom(input), first_row, last, Number(input.Next())).ok()) {
        ExpectSnapshotRoundTrips(*joiner);
      }
      continue;
    }
    switch (kind) {
      case 0:
        logged = shard.Hello(from, &start);
        break;
      case 1: {
        const int64_t clock = Number(input.Next());
        (void)shard.Pull(from, clock, TensorFrom(input.Next()), absl::InfiniteFuture());
        break;
      }
      case 2: {
        op.kind = ShardOp::Kind::kPush;
        op.sequence = Number(input.Next());
        op.clock = Number(input.Next());
        op.keys = TensorFrom(input.Next());
        op.grads = TensorFrom(input.Next());
        logged = shard.Push(from, op.sequence, op.clock, op.keys, op.grads);
        break;
      }
      case 3:
        op.kind = ShardOp::Kind::kClock;
        op.clock = Number(input.Next());
        logged = shard.Clock(from, op.clock);
        break;
      case 4: {
        // A checkpoint's cut at any clock, and its release, written or not
        // (see Note [Sharded checkpoints]): the backup holds the same cut.
        op.kind = ShardOp::Kind::kCut;
        op.clock = Number(input.Next());
        int64_t agreed = 0;
        logged = shard.Cut(op.clock, &agreed);
        break;
      }
      case 5:
        op.kind = ShardOp::Kind::kRelease;
        op.clock = Number(input.Next());
        op.sequence = head[1] & 1;  // written
        logged = shard.Release(op.clock, op.sequence != 0);
        break;
      default:
        op.kind = ShardOp::Kind::kGone;
        logged = shard.TrainerGone(from.rank, from.incarnation);
        break;
    }
    // A change the shard made, its backup makes too.
    if (logged.ok() && logged->is_new && !backups[which]->Replay(op, logged->lsn).ok())
      std::abort();
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i]->Digest() != backups[i]->Digest()) std::abort();
    ExpectSnapshotRoundTrips(*shards[i]);
  }
  // Whatever came, the shards serve a proper request: a new trainer's
  // hello, then a pull at clock 0 (never waits) of keys shard 0 holds.
  for (auto& shard : shards) {
    const tessera::ps::Sender fresh{3, 100};
    int64_t start = 0;
    if (!shard->Hello(fresh, &start).ok()) std::abort();
    const at::Tensor candidates = at::arange(16, at::kLong);
    const at::Tensor mine = candidates.index_select(
        0, tessera::ps::ShardsOfKeys(shard->table(), 2, candidates)->eq(0).nonzero().squeeze(1));
    auto rows = shard->Pull(fresh, 0, mine, absl::InfiniteFuture()).Wait(absl::ZeroDuration());
    if (!rows.ok() || rows->size(0) != mine.numel()) std::abort();
  }
  return 0;
}
