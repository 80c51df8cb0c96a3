#include "rpc/buffer_pool.h"

#include <gtest/gtest.h>

namespace tessera::rpc {
namespace {

TEST(BufferPoolTest, ReusesAFreedBlockOfTheSameSizeClass) {
  auto pool = BufferPool::Create();
  void* first = nullptr;
  {
    at::Tensor t = pool->Allocate({1 << 20}, c10::ScalarType::Float);  // 4 MiB
    first = t.data_ptr();
    EXPECT_EQ(pool->cached_bytes(), 0u);
  }
  EXPECT_GE(pool->cached_bytes(), size_t{4} << 20);
  at::Tensor again = pool->Allocate({1000, 1000}, c10::ScalarType::Float);  // ~3.8 MiB
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(again.sizes(), (std::vector<int64_t>{1000, 1000}));
  EXPECT_EQ(pool->cached_bytes(), 0u);
}

TEST(BufferPoolTest, SmallTensorsBypassThePool) {
  auto pool = BufferPool::Create();
  { at::Tensor t = pool->Allocate({16}, c10::ScalarType::Float); }
  EXPECT_EQ(pool->cached_bytes(), 0u);
}

TEST(BufferPoolTest, CachedBytesStayUnderTheCap) {
  BufferPool::Options options;
  options.max_cached_bytes = size_t{6} << 20;
  auto pool = BufferPool::Create(options);
  {
    at::Tensor a = pool->Allocate({1 << 20}, c10::ScalarType::Float);
    at::Tensor b = pool->Allocate({1 << 20}, c10::ScalarType::Float);
  }
  EXPECT_LE(pool->cached_bytes(), options.max_cached_bytes);
  EXPECT_GT(pool->cached_bytes(), 0u);
}

TEST(BufferPoolTest, TensorsMayOutliveThePool) {
  at::Tensor survivor;
  {
    auto pool = BufferPool::Create();
    survivor = pool->Allocate({1 << 20}, c10::ScalarType::Float);
  }
  survivor.fill_(1.0f);  // still valid memory; freed when `survivor` dies
  EXPECT_EQ(survivor.sum().item<float>(), float(1 << 20));
}

}  // namespace
}  // namespace tessera::rpc
