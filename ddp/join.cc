#include "ddp/join.h"

#include <ATen/ops/zeros.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tessera::ddp {
namespace {

// Layout of a round's counts (see Note [Joining with uneven inputs]).
constexpr int64_t kBackwardCount = 0;
constexpr int64_t kSyncBuffersCount = 1;
constexpr int64_t kFirstTrainingFlag = 2;

// This rank's contribution to a round.
at::Tensor Contribution(const collectives::ProcessGroup& group, std::optional<JoinStep> step) {
  at::Tensor counts = at::zeros({kFirstTrainingFlag + group.size()}, at::kLong);
  if (step.has_value()) {
    int64_t* data = counts.data_ptr<int64_t>();
    data[*step == JoinStep::kBackward ? kBackwardCount : kSyncBuffersCount] = 1;
    data[kFirstTrainingFlag + group.rank()] = 1;
  }
  return counts;
}

}  // namespace

JoinAnnouncement::JoinAnnouncement(collectives::ProcessGroup* group, std::optional<JoinStep> step)
    : counts_(Contribution(*group, step)),
      work_(group->Allreduce(counts_, collectives::ReduceOp::kSum)) {}

absl::StatusOr<JoinRound> JoinAnnouncement::Wait(absl::Duration timeout) {
  auto done = work_.Wait(timeout);
  if (!done.ok()) {
    return Annotate(done.status(), "DistributedDataParallel::Join: announcement round failed");
  }
  const int64_t* counts = counts_.data_ptr<int64_t>();
  JoinRound round;
  for (int64_t r = 0; r + kFirstTrainingFlag < counts_.numel(); ++r) {
    if (counts[kFirstTrainingFlag + r] != 0) round.training.push_back(static_cast<int>(r));
  }
  const int64_t backward = counts[kBackwardCount];
  const int64_t sync_buffers = counts[kSyncBuffersCount];
  if (backward > 0 && sync_buffers > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedDataParallel::Join: ranks disagree on the next step: ", backward,
                     " run a backward pass while ", sync_buffers,
                     " sync buffers (every rank still training must run the same steps)"));
  }
  if (backward > 0) round.step = JoinStep::kBackward;
  if (sync_buffers > 0) round.step = JoinStep::kSyncBuffers;
  return round;
}

absl::StatusOr<JoinRound> JoinTracker::Settle(JoinAnnouncement& announcement,
                                              absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(JoinRound round, announcement.Wait(timeout));
  TESSERA_RETURN_IF_ERROR(Observe(round));
  return round;
}

absl::Status JoinTracker::Observe(const JoinRound& round) {
  MutexLock lock(&mu_);
  if (!terminated_.ok()) return terminated_;
  if (!round.step.has_value()) return absl::OkStatus();
  last_training_ = round.training;
  if (!options_.throw_on_early_termination ||
      static_cast<int>(round.training.size()) == world_size_) {
    return absl::OkStatus();
  }
  std::vector<int> joined;
  for (int r = 0; r < world_size_; ++r) {
    if (!std::binary_search(round.training.begin(), round.training.end(), r)) joined.push_back(r);
  }
  const bool still_training =
      std::binary_search(round.training.begin(), round.training.end(), rank_);
  terminated_ = absl::FailedPreconditionError(absl::StrCat(
      "DistributedDataParallel::Join: rank(s) ", absl::StrJoin(joined, ", "), " ran out of inputs",
      still_training
          ? ""
          : absl::StrCat(" while rank(s) ", absl::StrJoin(round.training, ", "), " still had some"),
      "; stopping every rank (JoinOptions::throw_on_early_termination)"));
  return terminated_;
}

absl::Status JoinTracker::Stopped() const {
  MutexLock lock(&mu_);
  return terminated_;
}

int JoinTracker::Authority() const {
  MutexLock lock(&mu_);
  return last_training_.empty() ? 0 : last_training_.back();
}

double JoinTracker::GradientScale() const {
  MutexLock lock(&mu_);
  if (options_.divide_by_initial_world_size || last_training_.empty()) return 1.0;
  return static_cast<double>(world_size_) / static_cast<double>(last_training_.size());
}

}  // namespace tessera::ddp
