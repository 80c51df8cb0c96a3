// Joining with uneven inputs: the protocol pieces behind
// DistributedDataParallel::Join (the C++ counterpart of PyTorch's
// `with model.join():`).
//
// Note [Joining with uneven inputs]: every synchronised backward pass and
// every SyncBuffers is a collective, so a rank that runs out of data while
// others still have some would leave them waiting in their next allreduce
// until it times out. Inside a Join, each of those steps starts with an
// announcement round — one small allreduce of
//   [ranks about to run a backward pass, ranks about to sync buffers,
//    one flag per rank: still training]
// — that a rank still training enters with its step (asynchronously for a
// backward pass: the buckets' allreduces queue behind it) and a rank that
// has joined (JoinGuard::Finish) enters with zeros. A joined rank loops on
// rounds and shadows each announced step with the same collectives: zero
// gradients in the same buckets (so the average is over the initial world
// size, or — divide_by_initial_world_size = false — rescaled to the ranks
// still training), the bucket-order broadcast if the ranks rebuild their
// buckets then (see Note [Bucket rebuild]), the buffers broadcast. Broadcasts
// come from the highest rank still training (rank 0 may have joined with
// stale buffers), as PyTorch. A round of zeros everywhere means every rank
// has joined; the last ones to train then broadcast the final parameters
// and buffers to all, so every replica leaves the Join alike. Every rank
// sees every round, so all reach the same conclusions without more
// messages.
//
// throw_on_early_termination: the first round in which some rank has joined
// fails on every rank instead — before any gradient is sent, since the
// backward pass waits for its round in that mode.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "common/mutex.h"

namespace tessera::ddp {

struct JoinOptions {
  // Averages are over every rank, a joined one contributing zero (PyTorch's
  // default); false: over the ranks still training.
  bool divide_by_initial_world_size = true;
  // Fail every rank as soon as one runs out of inputs, instead of shadowing.
  bool throw_on_early_termination = false;
};

// The collective steps a rank still training announces.
enum class JoinStep { kBackward, kSyncBuffers };

// What every rank learns from a round.
struct JoinRound {
  std::optional<JoinStep> step;  // none: every rank has joined
  std::vector<int> training;     // the ranks that announced it, ascending
};

// One announcement round: started at construction, a collective every rank
// enters (`step`: what this rank does next; none: it has joined).
class JoinAnnouncement {
 public:
  JoinAnnouncement(collectives::ProcessGroup* group, std::optional<JoinStep> step);
  // InvalidArgument if ranks announced different steps; the group's error
  // if the round fails.
  absl::StatusOr<JoinRound> Wait(absl::Duration timeout);

 private:
  at::Tensor counts_;
  collectives::Work work_;
};

// One rank's view of a Join, shared by the DDP wrapper and its Reducer.
// Thread-safe.
class JoinTracker {
 public:
  JoinTracker(int rank, int world_size, JoinOptions options)
      : rank_(rank), world_size_(world_size), options_(options) {}

  const JoinOptions& options() const { return options_; }

  // OK, or why this Join was stopped (throw_on_early_termination): a rank
  // that knows it must not start another round.
  absl::Status Stopped() const;

  // Waits for `announcement` and takes in the round every rank saw: the
  // round, or the group's error, or FailedPrecondition under
  // throw_on_early_termination once some rank has joined — and from then on.
  absl::StatusOr<JoinRound> Settle(JoinAnnouncement& announcement, absl::Duration timeout);
  // Where broadcasts come from: the highest rank of the last round in which
  // any rank trained (rank 0 before any such round).
  int Authority() const;
  // What averaged gradients are multiplied by after the last round: 1, or
  // world size / ranks training when not dividing by the initial size.
  double GradientScale() const;

 private:
  absl::Status Observe(const JoinRound& round);

  const int rank_;
  const int world_size_;
  const JoinOptions options_;
  mutable Mutex mu_;
  std::vector<int> last_training_ ABSL_GUARDED_BY(mu_);
  absl::Status terminated_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::ddp
