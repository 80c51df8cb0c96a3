// Checked collectives, the counterpart of PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL: before each collective the ranks exchange
// a fingerprint of the call -- which collective, its reduce op or root, and
// each tensor's dtype, shape, device and contiguity -- and compare them.
//
// Unchecked, a rank that passes a different shape or dtype gets a wrong
// result, a timeout, or worse: over Gloo, a rank sent more bytes than it
// expects aborts its process (Gloo enforces the size on its own network
// thread, where nothing can catch it -- PyTorch's Gloo backend aborts
// alike); over NCCL it is undefined behaviour. Checked, every rank fails
// that call at once with INVALID_ARGUMENT saying which ranks issued what,
// and the mismatched collective is never run, so the group stays usable for
// the next call.
//
// Cost: one small allgather before each collective, and collectives run one
// after another (each waits for the previous one to finish); measured in
// docs/benchmarks-history.md. Point-to-point Send/Recv pass through unchecked (a
// pair has no collective to compare over; the NCCL backend checks each
// message's header, Gloo its byte count).
//
// Enabled for env:// groups with TESSERA_DISTRIBUTED_DEBUG=DETAIL
// (collectives/env_rendezvous.h), or by wrapping any group here.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "collectives/process_group.h"

namespace tessera::collectives {

// Wraps `inner`; `timeout` is the inner group's own bound on a collective.
// Each wait for the inner group is bounded by twice that, so the inner
// group's timeout error, which says more, comes first.
std::unique_ptr<ProcessGroup> WithCollectiveChecks(std::unique_ptr<ProcessGroup> inner,
                                                   absl::Duration timeout);

}  // namespace tessera::collectives
