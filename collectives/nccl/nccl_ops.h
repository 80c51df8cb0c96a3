// What the NCCL process group's collectives and point-to-point share: dtype
// and reduction mapping, tensor checks, and running an operation on a
// communicator's thread as a Work. Internal to collectives/nccl.
#pragma once

#include <ATen/core/Tensor.h>
#include <nccl.h>

#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "common/thread_pool.h"

namespace tessera::collectives::nccl {

absl::StatusOr<ncclDataType_t> NcclType(c10::ScalarType type);
ncclRedOp_t NcclReduceOp(ReduceOp op);

// A tensor NCCL can take: defined, contiguous, of a supported dtype, and in
// CPU memory or on `device`.
absl::Status CheckTensor(const at::Tensor& tensor, const char* what, int device);

// Runs `op` on `worker` (one thread: operations run in the order posted) with
// a deadline of `timeout` from when it starts.
Work PostOperation(ThreadPool& worker, absl::Duration timeout,
                   std::function<absl::Status(absl::Time deadline)> op);

}  // namespace tessera::collectives::nccl
