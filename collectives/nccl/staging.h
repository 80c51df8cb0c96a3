// Where an NCCL operation finds a tensor's elements on the device.
//
// LibTorch here is a CPU build, so CPU tensors are staged: copied into the
// communicator's scratch buffer before the operation and back after it.
// With a CUDA-enabled LibTorch, tensors on the communicator's device are
// used in place, ordered after the work LibTorch queued on the default
// stream (where it queues unless told otherwise).
// Internal to collectives/nccl.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "collectives/nccl/nccl_communicator.h"

namespace tessera::collectives::nccl {

// The device address for `tensor`: its own for a CUDA tensor; for a CPU
// tensor, `offset` bytes into comm.scratch() — reserved beforehand by the
// caller — holding a copy of the tensor when `copy_in`.
absl::StatusOr<char*> StageIn(NcclCommunicator& comm, const at::Tensor& tensor, size_t offset,
                              bool copy_in);

// Copies the result at `device_data` into a CPU tensor; nothing to do for a
// CUDA tensor, which holds it already.
absl::Status StageOut(NcclCommunicator& comm, const at::Tensor& tensor, const char* device_data);

// Scratch bytes needed to stage `tensors` (0 for CUDA tensors).
size_t StagingBytes(std::initializer_list<const at::Tensor*> tensors);

}  // namespace tessera::collectives::nccl
