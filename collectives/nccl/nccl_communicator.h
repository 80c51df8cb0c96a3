// NcclCommunicator: one NCCL communicator in non-blocking mode, with its own
// CUDA stream and staging buffer, whose every wait has a deadline.
//
// NCCL's default (blocking) calls wait forever for ranks that never come.
// In non-blocking mode (ncclConfig_t::blocking = 0) every call returns at
// once and progress is read from ncclCommGetAsyncError, so we poll against a
// deadline and ncclCommAbort a communicator whose peers are missing or dead —
// what PyTorch's NCCL watchdog does from a thread of its own. An aborted
// communicator stays broken: every later operation fails with the first
// error, since the ranks no longer agree on what was done.
//
// Internal to collectives/nccl. Thread-safety: driven by one thread at a time.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/nccl/device_buffer.h"
#include "store/store_client.h"

namespace tessera::collectives::nccl {

class NcclCommunicator {
 public:
  // Rank 0 of the communicator makes NCCL's unique id and publishes it in
  // `store` under `key`; the other ranks read it there. DeadlineExceeded
  // (and an aborted communicator) when not every rank joins by `deadline`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(store::StoreClient& store,
                                                                  const std::string& key, int rank,
                                                                  int size, int device,
                                                                  absl::Time deadline);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  DeviceBuffer& scratch() { return *scratch_; }

  // Makes the device current for the calling thread (CUDA's current device
  // is per thread); fails once the communicator is broken.
  absl::Status Activate();

  // Enqueues `calls` (NCCL calls on the communicator and stream()) and
  // waits until all work on stream() has finished. The caller activated the
  // device for this operation. An NCCL error, a CUDA
  // error or the deadline aborts the communicator.
  absl::Status Run(const std::string& what,
                   const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& calls,
                   absl::Time deadline);

  // Aborts the communicator (for good) and remembers `why`; returns it.
  absl::Status Break(absl::Status why);

 private:
  NcclCommunicator(int rank, int size, int device) : rank_(rank), size_(size), device_(device) {}

  // FailedPrecondition once broken.
  absl::Status Usable() const;
  // Whether NCCL is still processing the last call (in non-blocking mode a
  // call may return before it is done), or the asynchronous error it reports.
  absl::StatusOr<bool> NcclBusy(const std::string& what);
  // Polls NcclBusy until NCCL is done with the last call.
  absl::Status AwaitNccl(const std::string& what, absl::Time deadline);
  // Waits for stream(), watching for asynchronous NCCL errors.
  absl::Status Synchronize(const std::string& what, absl::Time deadline);

  const int rank_;
  const int size_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::unique_ptr<DeviceBuffer> scratch_;
  absl::Status broken_;
};

}  // namespace tessera::collectives::nccl
