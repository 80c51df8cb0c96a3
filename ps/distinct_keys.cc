#include "ps/distinct_keys.h"

#include <ATen/ops/empty.h>

#include "ps/key_slots.h"

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
  KeySlots places(n);  // a key -> its first place in `unique`
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto [place, made] = places.FindOrAdd(key[i], count);
    if (made) first[count++] = key[i];
    inverse[i] = place;
  }
  distinct.keys = unique.narrow(0, 0, count);
  return distinct;
}

}  // namespace tessera::ps
