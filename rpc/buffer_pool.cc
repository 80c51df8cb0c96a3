#include "rpc/buffer_pool.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstdlib>

namespace tessera::rpc {
namespace {

constexpr size_t kAlignment = 64;

// Size classes: multiples of 1/8 of the next power of two, so a block is at
// most 12.5% larger than asked and similar sizes share blocks.
size_t Capacity(size_t bytes) {
  size_t power = 1;
  while (power < bytes) power <<= 1;
  const size_t step = std::max<size_t>(power / 8, kAlignment);
  return (bytes + step - 1) / step * step;
}

}  // namespace

std::shared_ptr<BufferPool> BufferPool::Create(Options options) {
  return std::shared_ptr<BufferPool>(new BufferPool(options));
}

BufferPool::~BufferPool() {
  MutexLock lock(&mu_);
  for (auto& [capacity, block] : free_) std::free(block);
}

at::Tensor BufferPool::Allocate(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t size : sizes) numel *= size;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  const auto options = at::TensorOptions().dtype(dtype);
  if (bytes < options_.min_pooled_bytes) return at::empty(sizes, options);

  const size_t capacity = Capacity(bytes);
  void* block = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = free_.find(capacity);
    if (it != free_.end()) {
      block = it->second;
      free_.erase(it);
      cached_bytes_ -= capacity;
    }
  }
  if (block == nullptr) block = std::aligned_alloc(kAlignment, capacity);
  if (block == nullptr) throw std::bad_alloc();
  std::weak_ptr<BufferPool> weak = weak_from_this();
  return at::from_blob(
      block, sizes,
      [weak, capacity](void* data) {
        if (auto pool = weak.lock()) {
          pool->Release(data, capacity);
        } else {
          std::free(data);
        }
      },
      options);
}

void BufferPool::Release(void* block, size_t capacity) {
  {
    MutexLock lock(&mu_);
    if (cached_bytes_ + capacity <= options_.max_cached_bytes) {
      free_.emplace(capacity, block);
      cached_bytes_ += capacity;
      return;
    }
  }
  std::free(block);
}

size_t BufferPool::cached_bytes() const {
  MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace tessera::rpc
