// libFuzzer target for the bounds a peer's shared-memory handle must keep
// (see Note [Tensors in shared memory], rpc/shared_tensors.h): the offset, shape
// and dtype a frame names against a real 4 KiB segment. TensorInSegment
// either refuses them or makes a tensor lying wholly inside the segment;
// anything else aborts (a view past the segment would read another
// mapping's memory, or fault).
//
// Input layout: [dtype: 1 byte][offset: 8 bytes LE][n: 1 byte][n x 8-byte LE sizes].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rpc/shared_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::rpc::SharedSegment;
  static const auto segment = SharedSegment::Create(4096).value();
  static const at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kHalf,  at::kBFloat16,
                                           at::kByte,  at::kChar,   at::kShort, at::kInt,
                                           at::kLong,  at::kBool};
  if (size < 10) return 0;
  const at::ScalarType dtype = kDtypes[data[0] % (sizeof(kDtypes) / sizeof(kDtypes[0]))];
  uint64_t offset = 0;
  std::memcpy(&offset, data + 1, 8);
  const size_t count = std::min<size_t>(data[9] % 8, (size - 10) / 8);
  std::vector<int64_t> sizes(count);
  if (count > 0) std::memcpy(sizes.data(), data + 10, 8 * count);
  auto tensor = tessera::rpc::TensorInSegment(segment, offset, sizes, dtype);
  // An empty tensor has no data pointer (LibTorch gives null) to check.
  if (!tensor.ok() || tensor->nbytes() == 0) return 0;
  const char* first = static_cast<const char*>(tensor->data_ptr());
  const char* const begin = segment->data();
  if (first < begin || tensor->nbytes() > segment->size() ||
      first + tensor->nbytes() > begin + segment->size() ||
      (first - begin) % tensor->element_size() != 0) {
    std::abort();
  }
  // Reads its first and last bytes: inside the mapping.
  volatile char touch = first[0] + first[tensor->nbytes() - 1];
  (void)touch;
  return 0;
}
