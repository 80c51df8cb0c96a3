// The sharded parameter server at the size of a real job's trainer count:
// 64 trainers (the test process and 63 children) push a counting table
// held by 4 servers, all on this host; every count equals the pushes made.
// Pushes may be sent again: 68 processes on 2 cores can keep a replica from
// answering for failure_timeout (3 s), and the shard then moves on without
// it (see Note [Parameter-server replication], ps/ps_server.h) — a slow
// machine, not a fault (seen: 1 push of 10,238 sent again, on a day this
// machine ran the suite at half its usual speed). Each push is still
// counted once, which is the claim. Halfway, the test process asks for a
// checkpoint (see Note [Sharded checkpoints], ps/shard_cut.cc): its clock is
// every trainer's to reach, each ending a clock a round, and it must hold
// exactly the rounds before it of all 64.
#include <ATen/ops/arange.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/checkpoint_files.h"
#include "ps/op_log.h"
#include "ps/shard.h"
#include "tests/ps/ps_world.h"

namespace tessera::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

// The counts of keys 0..63 in the latest checkpoint under `dir`, read
// back onto one shard here; its clock in `clock`.
at::Tensor CheckpointedCounts(const std::string& dir, int64_t* clock) {
  const std::optional<ps::CheckpointLayout> layout = ps::LatestCheckpoint(dir, TestTables());
  if (!layout.has_value()) return {};
  *clock = layout->clock;
  auto shard = std::make_shared<ps::Shard>(TestTable("counts"), 0, 1, std::vector<int>{0},
                                           std::make_shared<ps::OpLog>(), nullptr);
  auto restored = ps::RestoreShardCheckpoint(dir, *layout, *shard, 0, 1, layout->clock);
  EXPECT_TRUE(restored.ok()) << restored.status();
  return shard->Pull(ps::Sender{0, 0}, 0, at::arange(64, at::kLong), absl::InfiniteFuture())
      .Get(kTimeout);
}

class PsScaleTest : public PsWorld {};

TEST_F(PsScaleTest, SixtyFourTrainersAgainstFourServersCountEveryPushOnce) {
  checkpoint_dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/scale");
  std::filesystem::remove_all(checkpoint_dir_);
  StartPs(4, 63, "count_clocked");
  std::optional<Future<int64_t>> saved;
  ExpectCountsOfEveryPush(/*sent_again=*/true, [&](int round) {
    ASSERT_TRUE(client().Clock().Wait(kTimeout).ok());
    if (round == kCountingRounds / 2) saved = client().Checkpoint();
  });
  ASSERT_TRUE(saved.has_value());
  auto cut = saved->Wait(kTimeout);
  ASSERT_TRUE(cut.ok()) << cut.status();
  int64_t clock = -1;
  const at::Tensor counts = CheckpointedCounts(checkpoint_dir_, &clock);
  ASSERT_TRUE(counts.defined()) << "no complete checkpoint";
  ASSERT_EQ(clock, *cut);
  std::map<int64_t, float> expected;  // the rounds before the cut, of every trainer
  for (int rank = 0; rank < 68; ++rank) {
    if (rank >= 1 && rank <= 4) continue;  // the servers
    for (int round = 0; round < *cut; ++round) {
      const at::Tensor keys = CountingKeys(rank, round);
      for (int64_t i = 0; i < keys.numel(); ++i) expected[keys[i].item<int64_t>()] += 1;
    }
  }
  for (int64_t key = 0; key < 64; ++key) {
    EXPECT_EQ(counts[key][0].item<float>(), expected[key]) << "key " << key << " at the cut";
  }
  std::printf("the checkpoint at clock %lld holds every trainer's first %lld rounds exactly\n",
              static_cast<long long>(*cut), static_cast<long long>(*cut));
}

}  // namespace
}  // namespace tessera::testing
