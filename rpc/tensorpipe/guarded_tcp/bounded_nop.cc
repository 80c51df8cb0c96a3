#include "rpc/tensorpipe/guarded_tcp/bounded_nop.h"

#include <cstdint>

namespace tessera::rpc::guarded_tcp {
namespace {

constexpr size_t kGuardBytes = 64 << 10;
const uint8_t kGuard[kGuardBytes] = {};

}  // namespace

nop::Status<void> ReadNopBounded(tensorpipe::AbstractNopHolder& object, const void* data,
                                 size_t length) {
  // A zero-length first buffer: the reader moves to the second at once.
  tensorpipe::NopReader reader(static_cast<const uint8_t*>(data), length, kGuard, kGuardBytes);
  nop::Status<void> status = object.read(reader);
  if (!status) return status;
  // Bytes are consumed in order, so the guard is untouched exactly when at
  // least its whole length remains.
  if (!reader.Ensure(kGuardBytes)) return nop::ErrorStatus::ReadLimitReached;
  return status;
}

}  // namespace tessera::rpc::guarded_tcp
