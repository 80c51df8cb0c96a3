#include "ddp/distributed_sampler.h"
#include "common/status.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include <torch/serialize/archive.h>

namespace tessera::ddp {
namespace {

std::vector<std::vector<size_t>> Shards(size_t n, int replicas, bool shuffle, bool drop_last,
                                        uint64_t epoch) {
  std::vector<std::vector<size_t>> shards;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(n, {replicas, rank, shuffle, /*seed=*/42, drop_last});
    sampler.set_epoch(epoch);
    shards.push_back(sampler.indices());
  }
  return shards;
}

TEST(DistributedSamplerTest, ShardsCoverEverythingDisjointlyWhenDivisible) {
  for (int replicas : {2, 3}) {
    auto shards = Shards(12, replicas, true, false, 0);
    std::multiset<size_t> seen;
    for (const auto& shard : shards) {
      EXPECT_EQ(shard.size(), 12u / replicas);
      seen.insert(shard.begin(), shard.end());
    }
    EXPECT_EQ(seen.size(), 12u);
    EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 12u);  // no repeats
  }
}

TEST(DistributedSamplerTest, PaddingGivesEveryRankTheSameNumberOfSteps) {
  auto shards = Shards(10, 3, true, false, 0);  // 10 -> padded to 12
  std::set<size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 4u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 10u);  // every example is read; two twice
}

TEST(DistributedSamplerTest, DropLastTruncatesInstead) {
  auto shards = Shards(10, 3, false, true, 0);
  std::set<size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 3u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(shards[1], (std::vector<size_t>{1, 4, 7}));  // strided, in order
}

TEST(DistributedSamplerTest, EpochReshufflesTheSameWayOnEveryRank) {
  auto epoch0 = Shards(100, 2, true, false, 0);
  auto epoch1 = Shards(100, 2, true, false, 1);
  EXPECT_NE(epoch0[0], epoch1[0]);
  EXPECT_EQ(Shards(100, 2, true, false, 1), epoch1);  // deterministic per epoch
  std::set<size_t> all(epoch1[0].begin(), epoch1[0].end());
  all.insert(epoch1[1].begin(), epoch1[1].end());
  EXPECT_EQ(all.size(), 100u);  // still a partition after the reshuffle
}

TEST(DistributedSamplerTest, BatchesWalkTheShardThenStop) {
  DistributedSampler sampler(7, {2, 1, false, 0, false});  // indices 1, 3, 5, 0
  auto first = sampler.next(3);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, (std::vector<size_t>{1, 3, 5}));
  EXPECT_EQ(*sampler.next(3), (std::vector<size_t>{0}));
  EXPECT_FALSE(sampler.next(3).has_value());
  sampler.reset();
  EXPECT_TRUE(sampler.next(1).has_value());
  const absl::Status bad_rank = StatusOf([] { DistributedSampler(5, {2, 2, true, 0, false}); });
  EXPECT_EQ(bad_rank.code(), absl::StatusCode::kInvalidArgument) << bad_rank;
}

// A checkpoint taken mid-epoch resumes at the same epoch and position.
TEST(DistributedSamplerTest, SaveAndLoadResumeMidEpoch) {
  DistributedSampler sampler(50, {2, 0, true, 7, false});
  sampler.set_epoch(3);
  (void)sampler.next(10);
  torch::serialize::OutputArchive out;
  sampler.save(out);
  std::stringstream stream;
  out.save_to(stream);

  DistributedSampler restored(50, {2, 0, true, 7, false});
  torch::serialize::InputArchive in;
  in.load_from(stream);
  restored.load(in);
  EXPECT_EQ(restored.indices(), sampler.indices());
  EXPECT_EQ(*restored.next(5), *sampler.next(5));
}

}  // namespace
}  // namespace tessera::ddp
