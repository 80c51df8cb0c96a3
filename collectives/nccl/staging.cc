#include "collectives/nccl/staging.h"

#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_status.h"
#include "common/status.h"

namespace tessera::collectives::nccl {
namespace {

// Makes comm.stream() wait for the work already queued on the legacy
// default stream (without blocking the host).
absl::Status OrderAfterDefaultStream(NcclCommunicator& comm) {
  cudaEvent_t queued = nullptr;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming),
                               "creating a CUDA event");
  cudaError_t error = cudaEventRecord(queued, cudaStreamLegacy);
  if (error == cudaSuccess) error = cudaStreamWaitEvent(comm.stream(), queued, 0);
  cudaEventDestroy(queued);  // released once the wait is satisfied
  return CudaStatus(error, "ordering after the default stream");
}

}  // namespace

absl::StatusOr<char*> StageIn(NcclCommunicator& comm, const at::Tensor& tensor, size_t offset,
                              bool copy_in) {
  if (tensor.device().is_cuda()) {
    TESSERA_RETURN_IF_ERROR(OrderAfterDefaultStream(comm));
    return static_cast<char*>(tensor.data_ptr());
  }
  const size_t bytes = tensor.nbytes();
  if (offset + bytes > comm.scratch().size()) {
    return absl::InternalError("staging buffer not reserved");
  }
  char* device_data = comm.scratch().data() + offset;
  if (copy_in && bytes > 0) {
    TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_data, tensor.data_ptr(), bytes,
                                                 cudaMemcpyHostToDevice, comm.stream()),
                                 "copying a tensor to the device");
  }
  return device_data;
}

absl::Status StageOut(NcclCommunicator& comm, const at::Tensor& tensor, const char* device_data) {
  if (tensor.device().is_cuda() || tensor.nbytes() == 0) return absl::OkStatus();
  // The stream is idle here (the operation was waited for, with its
  // deadline), and a copy to pageable memory returns once it is done.
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tensor.data_ptr(), device_data, tensor.nbytes(),
                                               cudaMemcpyDeviceToHost, comm.stream()),
                               "copying a result from the device");
  return absl::OkStatus();
}

size_t StagingBytes(std::initializer_list<const at::Tensor*> tensors) {
  size_t bytes = 0;
  for (const at::Tensor* tensor : tensors) {
    if (!tensor->device().is_cuda()) bytes += tensor->nbytes();
  }
  return bytes;
}

}  // namespace tessera::collectives::nccl
