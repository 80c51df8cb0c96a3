// Factory for the Gloo backend of ProcessGroup (CPU tensors over TCP),
// meeting through Tessera's rendezvous store; ranks that share a host
// reduce through shared memory (GlooOptions::shm).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/env_rendezvous.h"
#include "collectives/process_group.h"
#include "collectives/shm/shm_group_setup.h"
#include "common/host_address.h"
#include "store/store_client.h"

namespace tessera::collectives {

struct GlooOptions {
  // Where this rank's Gloo device listens, chosen towards the store's host
  // (see Note [Choosing the host address], common/host_address.h); settings left
  // empty come from GLOO_SOCKET_IFNAME, TESSERA_SOCKET_IFNAME, TESSERA_ADDRESS.
  // Gloo advertises the address it listens on: `advertise` is used only as
  // what a wildcard `address` listens on for (no NAT for Gloo, as PyTorch).
  AddressOptions address;
  // Bound on every collective and point-to-point wait; zero:
  // DefaultTimeout() (common/timeouts.h).
  absl::Duration timeout = absl::ZeroDuration();
  // Bound on meeting the other ranks (store waits and Gloo's full mesh).
  // Longer than `timeout`: the ranks of a multi-node job start as their
  // nodes do, minutes apart (PyTorch waits 30 minutes for either).
  absl::Duration connect_timeout = absl::Minutes(5);
  // Keys of this group in the store (one group per prefix).
  std::string store_prefix = "tessera/gloo";
  // Allreduce algorithm by size: Gloo's BCUBE (log2(size) exchange rounds)
  // for buffers of bcube_min_bytes..bcube_max_bytes, Gloo's ring
  // (reduce-scatter + allgather in pipelined chunks, bandwidth-optimal)
  // otherwise. Measured on loopback with 3 ranks (docs/benchmarks-history.md, "Gloo
  // allreduce algorithms"): BCUBE 25-30% faster at 4-64 KiB, the ring faster
  // from 256 KiB (1.5x at 64 MiB) and, oddly, for a few bytes.
  size_t bcube_min_bytes = 1 << 10;
  size_t bcube_max_bytes = 64 << 10;
  // Largest piece the ring pipelines (it keeps one in flight while reducing
  // another). Gloo's default is 1 MiB; each piece costs the calling thread a
  // wake-up per step, and on loopback 2-4 MiB pieces were ~10% faster for
  // 64-256 MiB buffers at 2 and 3 ranks (docs/benchmarks-history.md, "Ring segment
  // size"). Only buffers over 2 x world size MiB are cut differently from
  // Gloo's default.
  size_t ring_max_segment_bytes = 4 << 20;
  // Collectives between ranks of one host through shared memory, and
  // across hosts through one Gloo leader per host (collectives/shm/); Gloo carries
  // point to point. On by default; TESSERA_SHM_COLLECTIVES=0 turns it off.
  ShmCollectivesOptions shm;
};

// Connects all `size` ranks (bounded by options.connect_timeout). `store` must
// outlive the group. Throws StatusError naming the rank and what failed.
std::unique_ptr<ProcessGroup> CreateGlooProcessGroup(store::StoreClient* store, int rank, int size,
                                                     const GlooOptions& options = {});

// Like torch.distributed's env:// initialisation: RANK, WORLD_SIZE,
// MASTER_ADDR (default 127.0.0.1) and MASTER_PORT from the environment, as
// tessera-run sets them. A missing variable is an error naming it.
// Throws StatusError naming a missing variable or what failed.
EnvProcessGroup CreateGlooProcessGroupFromEnv(const GlooOptions& options = {});

}  // namespace tessera::collectives
