// absl::Status from CUDA runtime and NCCL results, naming the step that failed.
// Internal to collectives/nccl (it exposes CUDA and NCCL headers).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera::collectives::nccl {

absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// `comm` (may be null) adds NCCL's last error message for it.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm = nullptr);

}  // namespace tessera::collectives::nccl

#define TESSERA_CUDA_RETURN_IF_ERROR(call, what)                                      \
  do {                                                                                \
    if (cudaError_t tessera_cuda_error = (call); tessera_cuda_error != cudaSuccess) { \
      return ::tessera::collectives::nccl::CudaStatus(tessera_cuda_error, what);      \
    }                                                                                 \
  } while (false)
