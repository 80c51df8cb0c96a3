// Shard's part in a checkpoint: the cut at one clock.
//
// Note [Sharded checkpoints]: a checkpoint of the parameter server holds,
// for every table, the rows as the changes of every clock below one clock
// c left them, and none of a later clock's — on every shard alike, so that
// the shards fit together as one model would at clock c. A trainer asks
// for it (PsClient::Checkpoint); each shard's primary makes the cut a
// change (ShardOp::kCut), so its backups hold the same cut:
//   - Synchronous: clocks are applied up to c and no further (later
//     clocks' pushes wait as aggregates do anyway).
//   - Bounded staleness and asynchronous: a push of clock c or later is
//     taken (acknowledged, counted once) but held back, not applied.
// Once every live trainer has ended clock c − 1 (or none is live), the
// cut is reached: the rows are the cut's and stay so while it is held.
// The primary copies them (Shard::Snapshot), writes the copy
// (ps/checkpoint_files.h), then releases the cut (ShardOp::kRelease: what
// was held back is applied, in the order it was taken) — written before
// released, so a primary that dies in between leaves the cut held for its
// promoted backup, which takes it again (HeldCut).
//
// Where a shard applied a later clock's changes already (a fast trainer's
// pushes, under bounded or no staleness), it cannot cut at c: it agrees to
// the earliest clock it can, and the trainer asks every shard again at the
// latest clock any agreed to (a pending cut only moves later; what it held
// back below its new clock is applied then). Costs: a
// trainer does not read its own held pushes until the cut is released; a
// synchronous table's pulls past c wait for it; what is held back is kept
// in memory (the fastest trainer's lead over the slowest).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ps/shard.h"

namespace tessera::ps {

absl::StatusOr<bool> Shard::CutLocked(int64_t clock, int64_t* agreed) {
  int64_t furthest = applied_clock_;
  for (const auto& [rank, trainer] : trainers_) furthest = std::max(furthest, trainer.clock);
  if (clock < 0 || clock > furthest + kMaxClockAdvance) {
    // A cut far ahead would hold every push back for good.
    return absl::InvalidArgumentError(absl::StrCat("table '", table_.name, "' shard ", index_,
                                                   ": a cut at clock ", clock,
                                                   " with its trainers at clock ", furthest));
  }
  if (cut_held_) {
    if (clock <= cut_) {
      *agreed = cut_;
      return false;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("table '", table_.name, "' shard ", index_, ": a checkpoint's cut at clock ",
                     cut_, " is being taken; a cut at clock ", clock, " must wait for it"));
  }
  // The earliest clock this shard can still cut at.
  const int64_t earliest = table_.consistency.kind == Consistency::Kind::kSynchronous
                               ? applied_clock_
                               : last_push_clock_ + 1;
  *agreed = std::max({clock, earliest, cut_});
  if (*agreed == cut_) return false;
  // A cut moved later: what it held back below its new clock is the cut's.
  ApplyHeldLocked(*agreed);
  cut_ = *agreed;
  return true;
}

void Shard::ApplyHeldLocked(int64_t clock) {
  std::vector<HeldPush> later;
  for (HeldPush& push : held_) {
    if (push.clock >= clock) {
      later.push_back(std::move(push));
      continue;
    }
    // Checked when it came: applying cannot fail on its keys.
    (void)ApplySummed(push.keys, push.grads, 1);
  }
  held_ = std::move(later);
}

void Shard::CheckCutLocked() {
  if (cut_ < 0 || cut_held_) return;
  const int64_t slowest = SlowestLocked();
  const bool reached = table_.consistency.kind == Consistency::Kind::kSynchronous
                           ? applied_clock_ >= cut_ || slowest < 0
                           : slowest < 0 || slowest >= cut_;
  if (!reached) return;
  cut_held_ = true;
  cut_news_ = true;
}

bool Shard::ReleaseLocked(int64_t clock, bool written) {
  if (!cut_held_ || clock != cut_) return false;
  (written ? saved_clock_ : failed_clock_) = clock;
  auto done = std::stable_partition(saved_waits_.begin(), saved_waits_.end(),
                                    [clock](const auto& wait) { return wait.first > clock; });
  for (auto it = done; it != saved_waits_.end(); ++it) {
    saved_ready_.emplace_back(it->second, written ? absl::OkStatus() : NotWritten(clock));
  }
  saved_waits_.erase(done, saved_waits_.end());
  ApplyHeldLocked(INT64_MAX);
  cut_ = -1;
  cut_held_ = false;
  return true;
}

absl::StatusOr<Logged> Shard::Cut(int64_t clock, int64_t* agreed) {
  return Make(ShardOp{ShardOp::Kind::kCut, {}, 0, clock, {}, {}}, agreed);
}

absl::StatusOr<Logged> Shard::Release(int64_t clock, bool written) {
  return Make(ShardOp{ShardOp::Kind::kRelease, {}, written ? 1 : 0, clock, {}, {}}, nullptr);
}

Future<std::monostate> Shard::Saved(int64_t clock) {
  MutexLock lock(&mu_);
  if (saved_clock_ >= clock) return Future<std::monostate>::Ready(std::monostate{});
  if (failed_clock_ == clock) return Future<std::monostate>::Ready(NotWritten(clock));
  if (cut_ < clock) {
    // No cut at `clock` or later here to wait for: every replica that held
    // it was lost and the shard restored from an earlier checkpoint (a
    // cut is replicated before it is agreed, so nothing else drops it).
    // Waited for, it would never come.
    return Future<std::monostate>::Ready(absl::FailedPreconditionError(absl::StrCat(
        "table '", table_.name, "' shard ", index_, " holds no checkpoint cut at clock ", clock,
        " (its last checkpoint written: clock ", saved_clock_,
        "): it was lost with every replica of the shard")));
  }
  Promise<std::monostate> wait;
  saved_waits_.emplace_back(clock, wait);
  return wait.GetFuture();
}

absl::Status Shard::NotWritten(int64_t clock) const {
  return absl::DataLossError(absl::StrCat("table '", table_.name, "' shard ", index_,
                                          ": its checkpoint at clock ", clock,
                                          " could not be written (its primary's log says why)"));
}

void Shard::ResumeAt(int64_t clock) {
  MutexLock lock(&mu_);
  applied_clock_ = clock;
  for (auto& [rank, trainer] : trainers_) trainer.clock = clock;
  last_push_clock_ = clock - 1;
  saved_clock_ = clock;
}

bool Shard::Behind(int rank, int64_t clock) const {
  MutexLock lock(&mu_);
  auto it = trainers_.find(rank);
  return it != trainers_.end() && it->second.live && it->second.clock < clock;
}

int64_t Shard::HeldCut() const {
  MutexLock lock(&mu_);
  return cut_held_ ? cut_ : -1;
}

void Shard::OnCutReached(std::function<void(int64_t clock)> reached) {
  MutexLock lock(&mu_);
  on_cut_ = std::move(reached);
}

}  // namespace tessera::ps
