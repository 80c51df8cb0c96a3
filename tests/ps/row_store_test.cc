// A shard's rows (ps/row_store.h) and the servers' optimizers
// (ps/row_optimizer.h), checked against a whole table and LibTorch's own
// optimizers.
#include "ps/row_store.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <cmath>
#include <utility>
#include <vector>

#include "ps/key_slots.h"
#include "ps/shard_map.h"

namespace tessera::ps {
namespace {

// The key-to-slot table keeps every key's slot as it grows, for keys that
// all share a shard's residue (as one shard's keys do), and gives a new key
// the slot offered.
TEST(RowStoreTest, KeySlotsKeepEverySlotThroughGrowth) {
  KeySlots slots;
  std::vector<int64_t> keys;
  for (int64_t key = 0; keys.size() < 100000; ++key) {
    if (MixKey(static_cast<uint64_t>(key)) % 4 == 1) keys.push_back(key);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(slots.FindOrAdd(keys[i], static_cast<int64_t>(i)),
              std::make_pair(static_cast<int64_t>(i), true));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(slots.FindOrAdd(keys[i], -7), std::make_pair(static_cast<int64_t>(i), false));
  }
  EXPECT_EQ(slots.size(), 100000);
}

// A row is made from its key alone: the same on a shard of four as in a
// table of one shard, and a sparse shard that grows past its first capacity
// keeps the rows it had. Reading a row never pushed gives its initial value
// and makes nothing (replicas hold only what changes made).
TEST(RowStoreTest, ARowStartsTheSameOnWhicheverShardAndSurvivesGrowth) {
  TableOptions table = TableOptions::Sparse("emb", 8);
  table.init = Initializer::Normal(0, 1, 42);
  RowStore whole(table, 0, 1);
  at::Tensor keys = at::arange(5000, at::kLong);
  ASSERT_TRUE(whole.Slots(keys).ok());
  at::Tensor all = whole.Read(keys);
  EXPECT_EQ(whole.size(), 5000);
  EXPECT_NEAR(all.std().item<double>(), 1.0, 0.05);
  at::Tensor shard_of = *ShardsOfKeys(table, 4, keys);
  for (int64_t s = 0; s < 4; ++s) {
    RowStore shard(table, s, 4);
    at::Tensor mine = keys.index_select(0, shard_of.eq(s).nonzero().squeeze(1));
    EXPECT_TRUE(at::equal(shard.Read(mine), all.index_select(0, mine)));
    EXPECT_EQ(shard.size(), 0) << "reading made rows";
    EXPECT_FALSE(shard.Check(keys).ok()) << "shard " << s << " took every key";
  }
}

// Lazy Adam on rows pushed every step is Adam: the same values as
// torch::optim::Adam after five steps.
TEST(RowStoreTest, LazyAdamOnRowsPushedEveryStepIsAdam) {
  TableOptions table = TableOptions::Dense("w", 4, 3);
  table.init = Initializer::Uniform(-1, 1, 5);
  table.optimizer = OptimizerOptions::Adam(0.05);
  RowStore rows(table, 0, 1);
  at::Tensor keys = at::arange(4, at::kLong);
  at::Tensor slots = *rows.Slots(keys);
  at::Tensor reference = rows.Read(keys).clone().set_requires_grad(true);
  torch::optim::Adam adam({reference}, torch::optim::AdamOptions(0.05));
  at::Generator generator = at::detail::createCPUGenerator(11);
  for (int step = 0; step < 5; ++step) {
    at::Tensor grad = at::randn({4, 3}, generator);
    rows.Apply(slots, grad);
    reference.mutable_grad() = grad.clone();
    adam.step();
  }
  EXPECT_TRUE(at::allclose(rows.Read(keys), reference.detach(), 1e-5, 1e-6));
}

// Row-wise Adagrad: one accumulator per row, of its mean squared gradient.
TEST(RowStoreTest, RowWiseAdagradKeepsOneAccumulatorPerRow) {
  TableOptions table = TableOptions::Sparse("emb", 2);
  table.optimizer = OptimizerOptions::Adagrad(0.1, 0);
  RowStore rows(table, 0, 1);
  const at::Tensor key = at::full({1}, 11, at::kLong);
  at::Tensor slot = *rows.Slots(key);
  rows.Apply(slot, at::full({1, 2}, 2.0));  // accumulator 4: step 0.1 * 2 / 2
  rows.Apply(slot, at::full({1, 2}, 3.0));  // accumulator 13: step 0.1 * 3 / sqrt(13)
  const double expected = -0.1 - 0.3 / std::sqrt(13.0);
  EXPECT_NEAR(rows.Read(key)[0][0].item<double>(), expected, 1e-6);
}

}  // namespace
}  // namespace tessera::ps
