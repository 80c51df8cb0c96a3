#include "collectives/nccl/device_buffer.h"

#include "collectives/nccl/nccl_status.h"

namespace tessera::collectives::nccl {

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);
}

absl::StatusOr<char*> DeviceBuffer::Reserve(size_t bytes) {
  if (bytes <= size_) return data_;
  if (data_ != nullptr) {
    TESSERA_CUDA_RETURN_IF_ERROR(cudaFreeAsync(data_, stream_), "freeing the staging buffer");
    data_ = nullptr;
    size_ = 0;
  }
  // Round up so that a run of slightly growing tensors reallocates rarely.
  const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
  void* data = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&data, rounded, stream_),
                               "allocating the staging buffer");
  data_ = static_cast<char*>(data);
  size_ = rounded;
  return data_;
}

}  // namespace tessera::collectives::nccl
