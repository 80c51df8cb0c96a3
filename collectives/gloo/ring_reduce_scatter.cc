#include "collectives/gloo/ring_reduce_scatter.h"

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <memory>
#include <string>
#include <vector>

namespace tessera::collectives {
namespace {

// Slot prefix of this algorithm; Gloo's own collectives use 0x01..0x08.
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x70;

void Check(bool completed, const char* what, int peer) {
  if (!completed) {
    throw gloo::IoException(std::string("reduce_scatter: ") + what + " rank " +
                            std::to_string(peer) + " timed out");
  }
}

}  // namespace

// Step s (0 <= s < size-1): send chunk (rank-s-1) to the right neighbour,
// receive chunk (rank-s-2) from the left one and fold it in. The chunk sent
// at step s+1 is the one received at step s, so each chunk travels round the
// ring gathering one contribution per hop, and after size-1 hops chunk
// `rank` has met every rank's contribution — here.
void RingReduceScatter(gloo::Context& context, void* data, size_t chunk_elements,
                       size_t element_size, GlooReduceFn reduce, uint32_t tag,
                       std::chrono::milliseconds timeout) {
  const int size = context.size;
  const int rank = context.rank;
  if (size == 1 || chunk_elements == 0) return;
  const size_t chunk_bytes = chunk_elements * element_size;
  auto* bytes = static_cast<char*>(data);
  std::vector<char> incoming(chunk_bytes);
  auto send_buffer = context.createUnboundBuffer(bytes, chunk_bytes * size);
  auto recv_buffer = context.createUnboundBuffer(incoming.data(), chunk_bytes);
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);
  for (int step = 0; step < size - 1; ++step) {
    const int send_chunk = ((rank - step - 1) % size + size) % size;
    const int recv_chunk = ((rank - step - 2) % size + size) % size;
    recv_buffer->recv(left, slot);
    send_buffer->send(right, slot, send_chunk * chunk_bytes, chunk_bytes);
    int peer = -1;
    Check(recv_buffer->waitRecv(&peer, timeout), "receive from", left);
    char* target = bytes + recv_chunk * chunk_bytes;
    reduce(target, target, incoming.data(), chunk_elements);
    Check(send_buffer->waitSend(&peer, timeout), "send to", right);
  }
}

}  // namespace tessera::collectives
