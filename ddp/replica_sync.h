// Making DDP's replicas start alike: check that every rank holds the same
// model, then give every rank rank 0's values.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"

namespace tessera::ddp {

// Every rank must hold replicas of one model: the same number of
// parameters, each of the same dtype and shape. A mismatch would otherwise
// surface later as a collective of mismatched sizes — or, when two shapes
// have the same number of elements (a transposed weight), not at all: the
// broadcast of rank 0's values would silently fill the wrong layout.
//
// A collective: every rank calls it with its own parameters and their names.
// InvalidArgument naming the first parameter that differs (with this rank's
// dtype and shape of it) on every rank if they do not agree; the group's
// error if a collective fails.
absl::Status CheckReplicasAgree(collectives::ProcessGroup* group,
                                const std::vector<std::string>& names,
                                const std::vector<at::Tensor>& parameters, absl::Duration timeout);

// Copies `root`'s `tensors` (parameters, buffers) into every rank's, in
// place (rank 0's at creation; while ranks join, the last one still
// training's — ddp/join.h). Coalesced: tensors of one dtype travel together
// in flat buffers of up to 250 MiB, so a model of hundreds of small tensors
// costs a few collectives, not hundreds. A collective; every rank passes
// tensors of the same dtypes and shapes.
absl::Status BroadcastFrom(collectives::ProcessGroup* group, const std::vector<at::Tensor>& tensors,
                           int root, absl::Duration timeout);

}  // namespace tessera::ddp
