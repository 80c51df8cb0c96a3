#include "collectives/nccl/nccl_status.h"

#include "absl/strings/str_cat.h"

namespace tessera::collectives::nccl {

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": NCCL ", ncclGetErrorString(result));
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') {
    absl::StrAppend(&message, " (", last, ")");
  }
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tessera::collectives::nccl
