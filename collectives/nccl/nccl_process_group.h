// Factory for the NCCL backend of ProcessGroup: collectives on a CUDA device,
// meeting through Tessera's rendezvous store (NCCL's unique id is published
// there by rank 0).
//
// Built only where CUDA and NCCL are installed (//collectives/nccl is tagged manual;
// see WORKSPACE's @cuda). CPU tensors are staged through device memory — the
// LibTorch here is a CPU build — and tensors already on this rank's device
// (a CUDA-enabled LibTorch) are used in place. Each rank needs a GPU of its
// own: NCCL refuses two ranks on one device.
//
// Joining is bounded by NcclOptions::connect_timeout, every later wait by
// NcclOptions::timeout: a missing or dead rank fails the operation with
// DeadlineExceeded and aborts the communicator, after which every operation
// fails (the ranks no longer agree on what was done; make a new group).
// Send/Recv check the tag, size and dtype of each message against the
// receive.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/env_rendezvous.h"
#include "collectives/process_group.h"
#include "store/store_client.h"

namespace tessera::collectives {

struct NcclOptions {
  // CUDA device of this rank; -1 picks rank % VisibleCudaDevices() (the
  // FromEnv factory: LOCAL_RANK % VisibleCudaDevices()).
  int device = -1;
  // Bound on every operation; zero: DefaultTimeout() (common/timeouts.h).
  absl::Duration timeout = absl::ZeroDuration();
  // Bound on joining the other ranks (as GlooOptions::connect_timeout).
  absl::Duration connect_timeout = absl::Minutes(5);
  // Keys of this group in the store (one group per prefix).
  std::string store_prefix = "tessera/nccl";
};

// CUDA devices this process may use; 0 without a GPU or driver.
int VisibleCudaDevices();

// Connects all `size` ranks (bounded by options.connect_timeout). `store` must
// outlive the group. Throws StatusError: FailedPrecondition when no GPU is
// visible.
std::unique_ptr<ProcessGroup> CreateNcclProcessGroup(store::StoreClient* store, int rank, int size,
                                                     const NcclOptions& options = {});

// env:// initialisation, as CreateGlooProcessGroupFromEnv.
EnvProcessGroup CreateNcclProcessGroupFromEnv(const NcclOptions& options = {});

}  // namespace tessera::collectives
