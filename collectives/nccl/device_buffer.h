// DeviceBuffer: scratch device memory that grows to the largest size asked of
// it, allocated and freed in stream order (cudaMallocAsync), so growing it
// never synchronizes the device — a plain cudaFree would wait for every
// stream, including one stuck in a collective whose peer is gone.
// Internal to collectives/nccl. Thread-safety: used by one thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/statusor.h"

namespace tessera::collectives::nccl {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(cudaStream_t stream) : stream_(stream) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` of device memory; earlier pointers are invalid after a
  // call that grows the buffer.
  absl::StatusOr<char*> Reserve(size_t bytes);

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const cudaStream_t stream_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera::collectives::nccl
