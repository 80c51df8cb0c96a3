#include "ps/distinct_keys.h"

#include <ATen/ops/empty.h>

#include <vector>

#include "ps/key_hash.h"

namespace tessera::ps {

Distinct DistinctKeys(const at::Tensor& keys) {
  const at::Tensor contiguous = keys.contiguous();
  const int64_t n = contiguous.numel();
  const int64_t* key = contiguous.data_ptr<int64_t>();
  Distinct distinct;
  distinct.inverse = at::empty({n}, contiguous.options());
  at::Tensor unique = at::empty({n}, contiguous.options());
  int64_t* inverse = distinct.inverse.data_ptr<int64_t>();
  int64_t* first = unique.data_ptr<int64_t>();
  // Open addressing over a power of two at least twice the keys: each slot
  // holds the place in `first` of the key hashed there, or -1.
  size_t capacity = 16;
  while (capacity < 2 * static_cast<size_t>(n)) capacity *= 2;
  std::vector<int64_t> table(capacity, -1);
  const size_t mask = capacity - 1;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    size_t slot = MixKey(static_cast<uint64_t>(key[i])) & mask;
    while (table[slot] >= 0 && first[table[slot]] != key[i]) slot = (slot + 1) & mask;
    if (table[slot] < 0) {
      table[slot] = count;
      first[count++] = key[i];
    }
    inverse[i] = table[slot];
  }
  distinct.keys = unique.narrow(0, 0, count);
  return distinct;
}

}  // namespace tessera::ps
