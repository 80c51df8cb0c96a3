// BufferPool: reuses large receive buffers so that receiving a big tensor
// does not page-fault its way through fresh memory every time.
//
// glibc serves big allocations with mmap and returns them with munmap, so
// every 64 MiB tensor received would touch 16,384 new pages — measured here
// to cost more than the copy itself (1.6 GB/s instead of 6-7 GB/s). Tensors
// from Allocate() return their block to the pool when the last reference
// dies (from any thread); blocks are kept per size class up to a byte cap.
// Small tensors bypass the pool.
//
// Thread-safety: thread-safe. Tensors may outlive the pool: a block whose
// pool is gone is simply freed.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace tessera::rpc {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  struct Options {
    // Tensors smaller than this come from the regular allocator.
    size_t min_pooled_bytes = size_t{1} << 20;
    // Most bytes kept idle in the pool.
    size_t max_cached_bytes = size_t{1} << 30;
  };

  static std::shared_ptr<BufferPool> Create(Options options);
  static std::shared_ptr<BufferPool> Create() { return Create(Options()); }
  ~BufferPool();

  // An uninitialised contiguous CPU tensor.
  at::Tensor Allocate(c10::IntArrayRef sizes, c10::ScalarType dtype);

  size_t cached_bytes() const;

 private:
  explicit BufferPool(Options options) : options_(options) {}
  void Release(void* block, size_t capacity);

  const Options options_;
  mutable Mutex mu_;
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mu_);  // capacity -> block
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::rpc
