// Allgather through shared memory, per piece of a slot's size: each rank
// copies its input's piece into its slot; phase; each copies every rank's
// piece to its place in the output.
#include <algorithm>
#include <cstring>

#include "collectives/shm/shm_pieces.h"
#include "common/status.h"

namespace tessera::collectives {

absl::Status ShmAllgather(ShmPieces& pieces, const at::Tensor& input, const at::Tensor& output) {
  const size_t chunk = input.nbytes();
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  size_t offset = 0;
  do {
    const size_t len = std::min(pieces.slot_bytes(), chunk - offset);
    const int buffer = pieces.NextBuffer();
    std::memcpy(pieces.slot(pieces.local_rank(), buffer), in + offset, len);
    TESSERA_RETURN_IF_ERROR(pieces.Phase());
    for (int r = 0; r < pieces.local_size(); ++r) {
      std::memcpy(out + r * chunk + offset, pieces.slot(r, buffer), len);
    }
    offset += len;
  } while (offset < chunk);
  return absl::OkStatus();
}

}  // namespace tessera::collectives
