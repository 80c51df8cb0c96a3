#include "ps/shard.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "ps/distinct_keys.h"
#include "ps/key_hash.h"

namespace tessera::ps {

namespace {

uint64_t HashTensor(uint64_t hash, const at::Tensor& t) {
  at::Tensor contiguous = t.contiguous();
  return HashBytes(hash, contiguous.data_ptr(), contiguous.numel() * contiguous.element_size());
}

bool Synchronous(const TableOptions& table) {
  return table.consistency.kind == Consistency::Kind::kSynchronous;
}

}  // namespace

Shard::Shard(TableOptions table, int64_t index, int64_t shards, std::vector<int> trainers,
             std::shared_ptr<OpLog> log, DeadlineTimer* timer)
    : table_(std::move(table)),
      index_(index),
      log_(std::move(log)),
      timer_(timer),
      rows_(table_, index, shards) {
  for (int rank : trainers) trainers_[rank] = Trainer{};
}

absl::Status Shard::CheckSender(const Sender& from) {
  auto it = trainers_.find(from.rank);
  if (it == trainers_.end() || it->second.incarnation < from.incarnation) {
    // Not seen yet, or restarted: it says Hello first (PsClient does).
    return absl::FailedPreconditionError(
        absl::StrCat("table '", table_.name, "' shard ", index_, ": rank ", from.rank,
                     " incarnation ", from.incarnation, " has not said hello to this shard"));
  }
  if (it->second.incarnation > from.incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", table_.name, "' shard ", index_, ": refused a request of rank ",
                     from.rank, "'s incarnation ", from.incarnation, ": incarnation ",
                     it->second.incarnation, " replaced it"));
  }
  if (!it->second.live) {
    return absl::FailedPreconditionError(absl::StrCat("table '", table_.name, "' shard ", index_,
                                                      ": rank ", from.rank, " was reported gone"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Shard::HelloLocked(const Sender& from, int64_t* start) {
  auto it = trainers_.find(from.rank);
  if (it != trainers_.end() && it->second.incarnation > from.incarnation) {
    return CheckSender(from);  // refused: a newer incarnation replaced it
  }
  bool changed = false;
  if (it == trainers_.end() || it->second.incarnation < from.incarnation || !it->second.live) {
    // New, or a new incarnation: its pushes are new, and it starts with
    // the current rows — synchronous, at the first clock not applied (it
    // takes part in it); otherwise where the furthest live trainer is, so
    // as not to hold the others back.
    Trainer fresh;
    fresh.incarnation = from.incarnation;
    if (Synchronous(table_)) {
      fresh.clock = applied_clock_;
    } else {
      for (const auto& [rank, t] : trainers_) {
        if (rank != from.rank && t.live) fresh.clock = std::max(fresh.clock, t.clock);
      }
    }
    trainers_[from.rank] = fresh;
    changed = true;
  }
  *start = trainers_[from.rank].clock;
  return changed;
}

bool Shard::SeenBefore(Trainer& trainer, int64_t sequence) {
  if (sequence < trainer.sequences_below || !trainer.sequences_above.insert(sequence).second) {
    return true;
  }
  // Keep the set small: fold the sequences taken in order into the bound.
  while (!trainer.sequences_above.empty() &&
         *trainer.sequences_above.begin() == trainer.sequences_below) {
    trainer.sequences_above.erase(trainer.sequences_above.begin());
    ++trainer.sequences_below;
  }
  return false;
}

absl::Status Shard::ApplySummed(const at::Tensor& keys, const at::Tensor& grads, double divisor) {
  auto [unique, inverse] = DistinctKeys(keys);
  at::Tensor summed = grads;
  if (unique.numel() != keys.numel()) {
    summed = at::zeros({unique.numel(), table_.dim}, grads.options());
    summed.index_add_(0, inverse, grads);
  }
  if (divisor != 1) summed = summed / divisor;
  TESSERA_ASSIGN_OR_RETURN(auto slots, rows_.Slots(unique));
  rows_.Apply(slots, summed);
  return absl::OkStatus();
}

absl::Status Shard::CheckRows(const at::Tensor& keys, const at::Tensor& grads) const {
  if (!grads.defined() || grads.scalar_type() != at::kFloat || grads.dim() != 2 ||
      grads.size(0) != keys.numel() || grads.size(1) != table_.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table_.name, "' shard ", index_, ": a push of ", keys.numel(),
        " keys needs float gradients of shape [", keys.numel(), ", ", table_.dim, "], got ",
        grads.defined() ? absl::StrCat(grads.toString(), " ", c10::str(grads.sizes())) : "none"));
  }
  return rows_.Check(keys);
}

absl::StatusOr<bool> Shard::PushLocked(const ShardOp& op) {
  const Sender& from = op.from;
  if (auto ok = CheckSender(from); !ok.ok()) return ok;
  Trainer& trainer = trainers_[from.rank];
  if (op.clock < 0 || op.clock > trainer.clock + kMaxClockAdvance) {
    return absl::InvalidArgumentError(absl::StrCat("table '", table_.name, "' shard ", index_,
                                                   ": a push of clock ", op.clock, " from rank ",
                                                   from.rank, " at clock ", trainer.clock));
  }
  if (Synchronous(table_) && op.clock < applied_clock_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table '", table_.name, "' shard ", index_, ": a push of clock ", op.clock, " from rank ",
        from.rank, " came after clocks below ", applied_clock_, " were applied"));
  }
  // Checked before anything changes: a push is taken whole or not at all.
  if (auto ok = CheckRows(op.keys, op.grads); !ok.ok()) return ok;
  if (SeenBefore(trainer, op.sequence)) {
    ++stats_.duplicates;
    return false;
  }
  ++stats_.pushes_applied;
  last_push_clock_ = std::max(last_push_clock_, op.clock);
  if (Synchronous(table_)) {
    Aggregate& aggregate = aggregates_[op.clock];
    aggregate.keys.push_back(op.keys);
    aggregate.grads.push_back(op.grads);
    aggregate.pushers.insert(from.rank);
    return true;
  }
  if (cut_ >= 0 && op.clock >= cut_) {
    // Past a checkpoint's cut: applied once the cut is released.
    held_.push_back({op.clock, op.keys, op.grads});
    return true;
  }
  if (auto ok = ApplySummed(op.keys, op.grads, 1); !ok.ok()) return ok;
  return true;
}

absl::StatusOr<bool> Shard::ClockLocked(const Sender& from, int64_t clock) {
  if (auto ok = CheckSender(from); !ok.ok()) return ok;
  Trainer& trainer = trainers_[from.rank];
  if (clock > trainer.clock + kMaxClockAdvance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table_.name, "' shard ", index_, ": rank ", from.rank, " moved its clock from ",
        trainer.clock, " to ", clock, ", more than ", kMaxClockAdvance, " at once"));
  }
  if (clock <= trainer.clock) return false;
  trainer.clock = clock;
  return true;
}

bool Shard::GoneLocked(int rank, int64_t incarnation) {
  auto it = trainers_.find(rank);
  if (it == trainers_.end() || !it->second.live || it->second.incarnation > incarnation) {
    return false;
  }
  it->second.live = false;
  return true;
}

absl::StatusOr<bool> Shard::MakeLocked(const ShardOp& op, int64_t* answer, Ready* ready) {
  absl::StatusOr<bool> made = false;
  switch (op.kind) {
    case ShardOp::Kind::kPush:
      return PushLocked(op);
    case ShardOp::Kind::kHello:
      made = HelloLocked(op.from, answer);
      break;
    case ShardOp::Kind::kCut:
      made = CutLocked(op.clock, answer);
      break;
    case ShardOp::Kind::kRelease:
      made = ReleaseLocked(op.clock, op.sequence != 0);
      break;
    case ShardOp::Kind::kClock:
      made = ClockLocked(op.from, op.clock);
      break;
    case ShardOp::Kind::kGone:
      made = GoneLocked(op.from.rank, op.from.incarnation);
      break;
  }
  // What a trainer's clock, hello or end allows: clocks applied, pulls freed.
  if (made.ok()) AdvanceLocked(ready);
  return made;
}

absl::StatusOr<Logged> Shard::Make(const ShardOp& op, int64_t* answer) {
  Ready ready;
  absl::StatusOr<Logged> logged;
  std::function<void(int64_t)> reached;
  int64_t cut = -1;
  std::vector<std::pair<Promise<std::monostate>, absl::Status>> saved;
  {
    MutexLock lock(&mu_);
    int64_t unused = 0;
    auto made = MakeLocked(op, answer != nullptr ? answer : &unused, &ready);
    if (!made.ok()) {
      logged = made.status();
    } else if (*made) {
      logged = Logged{log_->Next(), true};
    } else {
      logged = Logged{log_->last(), false};
    }
    if (cut_news_) {
      cut_news_ = false;
      reached = on_cut_;
      cut = cut_;
    }
    saved.swap(saved_ready_);
  }
  for (auto& [promise, result] : ready) promise.Set(std::move(result));
  for (auto& [promise, result] : saved) {
    if (result.ok()) {
      promise.Set(std::monostate{});
    } else {
      promise.Set(result);
    }
  }
  if (reached) reached(cut);
  return logged;
}

absl::StatusOr<Logged> Shard::Push(const Sender& from, int64_t sequence, int64_t clock,
                                   const at::Tensor& keys, const at::Tensor& grads) {
  return Make(ShardOp{ShardOp::Kind::kPush, from, sequence, clock, keys, grads}, nullptr);
}

absl::StatusOr<Logged> Shard::Clock(const Sender& from, int64_t clock) {
  return Make(ShardOp{ShardOp::Kind::kClock, from, 0, clock, {}, {}}, nullptr);
}

absl::StatusOr<Logged> Shard::Hello(const Sender& from, int64_t* start) {
  return Make(ShardOp{ShardOp::Kind::kHello, from, 0, 0, {}, {}}, start);
}

Logged Shard::TrainerGone(int rank, int64_t incarnation) {
  auto logged =
      Make(ShardOp{ShardOp::Kind::kGone, Sender{rank, incarnation}, 0, 0, {}, {}}, nullptr);
  return logged.ok() ? *logged : Logged{};
}

absl::Status Shard::Replay(const ShardOp& op, int64_t lsn) {
  Ready ready;  // none: a backup serves no pulls
  MutexLock lock(&mu_);
  if (lsn <= restored_through_) return absl::OkStatus();  // in the snapshot
  int64_t answer = 0;
  auto made = MakeLocked(op, &answer, &ready);
  cut_news_ = false;     // a backup takes no checkpoint (a promoted one: HeldCut)
  saved_ready_.clear();  // and is asked for none
  if (!made.ok()) {
    // The primary made it, from the same state: this replica diverged.
    return absl::FailedPreconditionError(absl::StrCat(
        "table '", table_.name, "' shard ", index_,
        ": a backup could not repeat its primary's change (diverged): ", made.status().message()));
  }
  return absl::OkStatus();
}

int64_t Shard::SlowestLocked() const {
  int64_t slowest = -1;
  for (const auto& [rank, trainer] : trainers_) {
    if (trainer.live && (slowest < 0 || trainer.clock < slowest)) slowest = trainer.clock;
  }
  return slowest;  // -1: no live trainer
}

int64_t Shard::ReadableLocked() const {
  if (Synchronous(table_)) return applied_clock_;
  const int64_t slowest = SlowestLocked();
  if (slowest < 0) return INT64_MAX;
  return table_.consistency.kind == Consistency::Kind::kBoundedStaleness
             ? slowest + table_.consistency.staleness
             : INT64_MAX;
}

void Shard::ApplyClocksLocked() {
  // With no live trainer, what was taken is applied all the same.
  const int64_t slowest = SlowestLocked();
  int64_t target = slowest >= 0          ? slowest
                   : aggregates_.empty() ? applied_clock_
                                         : aggregates_.rbegin()->first + 1;
  // Not past a checkpoint's cut until it is released.
  if (cut_ >= 0) target = std::min(target, std::max(cut_, applied_clock_));
  while (applied_clock_ < target) {
    // Clocks nobody pushed in are passed over at once, however many.
    auto it = aggregates_.lower_bound(applied_clock_);
    if (it == aggregates_.end() || it->first >= target) {
      applied_clock_ = target;
      break;
    }
    // The trainers of the clock: those who pushed in it or ended it.
    std::set<int> took_part = it->second.pushers;
    for (const auto& [rank, trainer] : trainers_) {
      if (trainer.clock > it->first) took_part.insert(rank);
    }
    // Checked when each push came: applying cannot fail on its keys.
    (void)ApplySummed(at::cat(it->second.keys), at::cat(it->second.grads),
                      static_cast<double>(took_part.size()));
    applied_clock_ = it->first + 1;
    aggregates_.erase(it);
  }
}

void Shard::AdvanceLocked(Ready* ready) {
  if (Synchronous(table_)) ApplyClocksLocked();
  CheckCutLocked();
  const int64_t readable = ReadableLocked();
  auto keep = std::stable_partition(waiters_.begin(), waiters_.end(),
                                    [&](const Waiter& w) { return w.clock > readable; });
  for (auto it = keep; it != waiters_.end(); ++it) {
    ready->emplace_back(it->rows, rows_.Read(it->keys));
  }
  waiters_.erase(keep, waiters_.end());
}

Future<at::Tensor> Shard::Pull(const Sender& from, int64_t clock, const at::Tensor& keys,
                               absl::Time deadline) {
  MutexLock lock(&mu_);
  if (auto ok = CheckSender(from); !ok.ok()) return Future<at::Tensor>::Ready(ok);
  if (auto ok = rows_.Check(keys); !ok.ok()) return Future<at::Tensor>::Ready(ok);
  // A pull may read at the clock it was made at, or a later one.
  if (clock <= ReadableLocked()) return Future<at::Tensor>::Ready(rows_.Read(keys));
  Waiter waiter{clock, keys, Promise<at::Tensor>(), next_waiter_++};
  Future<at::Tensor> rows = waiter.rows.GetFuture();
  const uint64_t id = waiter.id;
  waiters_.push_back(std::move(waiter));
  if (timer_ != nullptr && deadline != absl::InfiniteFuture()) {
    // Before the caller gives up — a fifth of its wait, up to 2 s, early —
    // so that it hears who held it even from a loaded machine.
    const absl::Time when = deadline - std::min((deadline - absl::Now()) / 5, absl::Seconds(2));
    std::weak_ptr<Shard> weak = weak_from_this();
    timer_->Schedule(when, [weak, id] {
      if (auto self = weak.lock()) self->Expire(id);
    });
  }
  return rows;
}

std::string Shard::SlowTrainersLocked(int64_t clock) const {
  std::vector<std::string> slow;
  for (const auto& [rank, trainer] : trainers_) {
    if (trainer.live && trainer.clock < clock) {
      slow.push_back(absl::StrCat("rank ", rank, " at clock ", trainer.clock));
    }
  }
  return slow.empty() ? "none" : absl::StrJoin(slow, ", ");
}

void Shard::Expire(uint64_t id) {
  Promise<at::Tensor> expired;
  std::string message;
  {
    MutexLock lock(&mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(),
                           [id](const Waiter& w) { return w.id == id; });
    if (it == waiters_.end()) return;
    expired = it->rows;
    const int64_t wanted =
        Synchronous(table_) ? it->clock : it->clock - table_.consistency.staleness;
    message = absl::StrCat("table '", table_.name, "' shard ", index_, ": a pull at clock ",
                           it->clock, " waited until its deadline for the trainers behind clock ",
                           wanted, ": ", SlowTrainersLocked(wanted));
    waiters_.erase(it);
  }
  expired.Set(absl::DeadlineExceededError(message));
}

ShardStats Shard::Stats() const {
  MutexLock lock(&mu_);
  ShardStats stats = stats_;
  stats.rows = rows_.size();
  stats.clock = Synchronous(table_) ? applied_clock_ : std::max<int64_t>(0, SlowestLocked());
  return stats;
}

uint64_t Shard::Digest() const {
  MutexLock lock(&mu_);
  uint64_t hash = rows_.Digest();
  auto mix = [&hash](int64_t value) { hash = MixKey(hash ^ static_cast<uint64_t>(value)); };
  for (int64_t v : {applied_clock_, last_push_clock_, cut_, static_cast<int64_t>(cut_held_),
                    saved_clock_, failed_clock_}) {
    mix(v);
  }
  for (const HeldPush& push : held_) {
    mix(push.clock);
    hash = HashTensor(HashTensor(hash, push.keys), push.grads);
  }
  for (const auto& [rank, t] : trainers_) {
    for (int64_t v : {static_cast<int64_t>(rank), t.incarnation, t.clock,
                      static_cast<int64_t>(t.live), t.sequences_below}) {
      mix(v);
    }
    for (int64_t sequence : t.sequences_above) mix(sequence);
  }
  for (const auto& [clock, aggregate] : aggregates_) {
    mix(clock);
    for (int rank : aggregate.pushers) mix(rank);
    for (const auto& tensors : {aggregate.keys, aggregate.grads}) {
      for (const at::Tensor& t : tensors) hash = HashTensor(hash, t);
    }
  }
  return hash;
}

at::Tensor Shard::Values() const {
  MutexLock lock(&mu_);
  return rows_.Values();
}

}  // namespace tessera::ps
