// Reduce-scatter through shared memory, per part of each rank's chunk: each
// rank copies that part of every chunk of its input into its slot, side by
// side; phase; each rank reduces its own chunk's part over every rank's
// slot, in rank order (shm_reduce.h), into its output.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/shm/shm_pieces.h"
#include "collectives/shm/shm_reduce.h"
#include "common/status.h"

namespace tessera::collectives {

absl::Status ShmReduceScatter(ShmPieces& pieces, const at::Tensor& input, const at::Tensor& output,
                              ReduceOp op) {
  const int n = pieces.local_size();
  const int me = pieces.local_rank();
  const size_t element = input.element_size();
  const int64_t chunk = output.numel();
  const int64_t part =
      std::max<int64_t>(1, static_cast<int64_t>(pieces.slot_bytes() / element / n));
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  std::vector<const void*> sources(n);
  int64_t offset = 0;
  do {
    const int64_t len = std::min(part, chunk - offset);
    const int buffer = pieces.NextBuffer();
    for (int k = 0; k < n; ++k) {
      std::memcpy(pieces.slot(me, buffer) + k * part * element, in + (k * chunk + offset) * element,
                  len * element);
    }
    TESSERA_RETURN_IF_ERROR(pieces.Phase());
    for (int r = 0; r < n; ++r) sources[r] = pieces.slot(r, buffer) + me * part * element;
    ReduceElements(input.scalar_type(), op, sources.data(), n, len, n, out + offset * element,
                   nullptr);
    offset += len;
  } while (offset < chunk);
  return absl::OkStatus();
}

}  // namespace tessera::collectives
