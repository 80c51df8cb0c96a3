// Allreduce through shared memory, per piece of a slot's size: each rank
// copies its piece, but for its own part, into its slot; phase; rank r
// reduces the r-th part of the piece over all ranks in rank order
// (shm_reduce.h: the same bits everywhere; its own values read from its
// tensor) into its slot and its output; phase; each rank copies the other
// parts out.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/shm/shm_pieces.h"
#include "collectives/shm/shm_reduce.h"
#include "common/status.h"

namespace tessera::collectives {

absl::Status ShmAllreduce(ShmPieces& pieces, const at::Tensor& tensor, ReduceOp op) {
  const int n = pieces.local_size();
  const int me = pieces.local_rank();
  const int64_t numel = tensor.numel();
  const size_t element = tensor.element_size();
  const int64_t piece_elements = static_cast<int64_t>(pieces.slot_bytes() / element);
  auto* data = static_cast<uint8_t*>(tensor.data_ptr());
  // Part boundaries of a piece: multiples of 16 elements (whole vectors).
  auto bound = [n](int64_t len, int part) {
    if (part >= n) return len;
    return std::min(len, (len * part / n) & ~int64_t{15});
  };
  std::vector<const void*> sources(n);
  int64_t offset = 0;
  do {
    const int64_t len = std::min(piece_elements, numel - offset);
    const int buffer = pieces.NextBuffer();
    uint8_t* piece = data + offset * element;
    uint8_t* mine = pieces.slot(me, buffer);
    const int64_t lo = bound(len, me), hi = bound(len, me + 1);
    // The others' parts only: this rank reduces its own part from its
    // tensor (a quarter less memory traffic at two ranks).
    std::memcpy(mine, piece, lo * element);
    std::memcpy(mine + hi * element, piece + hi * element, (len - hi) * element);
    TESSERA_RETURN_IF_ERROR(pieces.Phase());
    for (int r = 0; r < n; ++r) {
      sources[r] = (r == me ? piece : pieces.slot(r, buffer)) + lo * element;
    }
    ReduceElements(tensor.scalar_type(), op, sources.data(), n, hi - lo, n, mine + lo * element,
                   piece + lo * element);
    TESSERA_RETURN_IF_ERROR(pieces.Phase());
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      const int64_t from = bound(len, r), to = bound(len, r + 1);
      std::memcpy(piece + from * element, pieces.slot(r, buffer) + from * element,
                  (to - from) * element);
    }
    offset += len;
  } while (offset < numel);
  return absl::OkStatus();
}

}  // namespace tessera::collectives
