// Broadcast through shared memory, per piece of a slot's size: the root
// copies the piece into its slot; phase; the others copy it out.
#include <algorithm>
#include <cstring>

#include "collectives/shm/shm_pieces.h"
#include "common/status.h"

namespace tessera::collectives {

absl::Status ShmBroadcast(ShmPieces& pieces, const at::Tensor& tensor, int root) {
  const bool is_root = pieces.local_rank() == root;
  const size_t total = tensor.nbytes();
  auto* data = static_cast<uint8_t*>(tensor.data_ptr());
  size_t offset = 0;
  do {
    const size_t len = std::min(pieces.slot_bytes(), total - offset);
    uint8_t* slot = pieces.slot(root, pieces.NextBuffer());
    if (is_root) std::memcpy(slot, data + offset, len);
    TESSERA_RETURN_IF_ERROR(pieces.Phase());
    if (!is_root) std::memcpy(data + offset, slot, len);
    offset += len;
  } while (offset < total);
  return absl::OkStatus();
}

}  // namespace tessera::collectives
