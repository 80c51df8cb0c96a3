// Shard::Snapshot and Shard::Restore: a shard to and from its ShardSnapshot
// (ps/shard_snapshot.h). Restore checks every count and shape first — a
// snapshot comes over the network — and names what does not fit.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ps/shard.h"

namespace tessera::ps {

namespace {

// Rows copied under the lock at a time: a few MiB (4 at 64 floats a row).
constexpr int64_t kRowsPerLock = 16384;
constexpr absl::Duration kPauseBetweenParts = absl::Microseconds(200);

}  // namespace

ShardSnapshot Shard::Snapshot(int64_t* cut) {
  MutexLock one(&snapshot_mu_);
  ShardSnapshot snapshot;
  MutexLock lock(&mu_);
  // Changes are numbered under this lock (Make), so this is exactly the
  // last one whose effect on this table the copy holds.
  *cut = log_->last();
  rows_.BeginSnapshot(&snapshot);
  for (const auto& [rank, t] : trainers_) {
    snapshot.trainers.insert(snapshot.trainers.end(),
                             {rank, t.incarnation, t.clock, static_cast<int64_t>(t.live),
                              t.sequences_below, static_cast<int64_t>(t.sequences_above.size())});
    snapshot.sequences_above.insert(snapshot.sequences_above.end(), t.sequences_above.begin(),
                                    t.sequences_above.end());
  }
  snapshot.counters = {
      applied_clock_, stats_.pushes_applied,           stats_.duplicates, last_push_clock_,
      cut_,           static_cast<int64_t>(cut_held_), saved_clock_,      failed_clock_};
  for (const HeldPush& push : held_) {
    snapshot.aggregates.insert(snapshot.aggregates.end(),
                               {ShardSnapshot::HeldBack(push.clock), 1, 0});
    snapshot.aggregate_keys.push_back(push.keys);
    snapshot.aggregate_grads.push_back(push.grads);
  }
  for (const auto& [clock, aggregate] : aggregates_) {
    snapshot.aggregates.insert(snapshot.aggregates.end(),
                               {clock, static_cast<int64_t>(aggregate.keys.size()),
                                static_cast<int64_t>(aggregate.pushers.size())});
    snapshot.aggregate_pushers.insert(snapshot.aggregate_pushers.end(), aggregate.pushers.begin(),
                                      aggregate.pushers.end());
    snapshot.aggregate_keys.insert(snapshot.aggregate_keys.end(), aggregate.keys.begin(),
                                   aggregate.keys.end());
    snapshot.aggregate_grads.insert(snapshot.aggregate_grads.end(), aggregate.grads.begin(),
                                    aggregate.grads.end());
  }
  while (!rows_.ContinueSnapshot(kRowsPerLock)) {
    // Pushes go on between the parts (copy-on-write). A thread woken for
    // the lock needs tens of µs to run; taken again at once (or after a
    // yield), the lock never reaches it (measured: no push got in during a
    // 100,000-row snapshot). A pause per part — 64 a GiB — lets it in.
    mu_.Unlock();
    absl::SleepFor(kPauseBetweenParts);
    mu_.Lock();
  }
  return snapshot;
}

namespace {

// Takes `n` items from a list of `size` at `*next`; false if there are not so many.
bool Take(int64_t n, size_t size, size_t* next) {
  if (n < 0 || static_cast<size_t>(n) > size - *next) return false;
  *next += static_cast<size_t>(n);
  return true;
}

}  // namespace

std::string Shard::ReadAggregates(const ShardSnapshot& snapshot,
                                  std::map<int64_t, Aggregate>* aggregates,
                                  std::vector<HeldPush>* held) {
  size_t pushes = 0, pushers = 0;
  for (size_t i = 0; i < snapshot.aggregates.size(); i += 3) {
    const int64_t clock = snapshot.aggregates[i];
    const bool held_back = clock <= ShardSnapshot::HeldBack(0);
    if ((clock < 0 && !held_back) ||
        (held_back && (snapshot.aggregates[i + 1] != 1 || snapshot.aggregates[i + 2] != 0))) {
      return absl::StrCat("an aggregate of clock ", clock, " of ", snapshot.aggregates[i + 1],
                          " pushes");
    }
    Aggregate one;  // a push held back
    Aggregate& aggregate = held_back ? one : (*aggregates)[clock];
    const size_t first_push = pushes, first_pusher = pushers;
    if (!Take(snapshot.aggregates[i + 1], snapshot.aggregate_keys.size(), &pushes) ||
        !Take(snapshot.aggregates[i + 2], snapshot.aggregate_pushers.size(), &pushers)) {
      return absl::StrCat("the aggregate of clock ", snapshot.aggregates[i],
                          " holds more than it carries");
    }
    for (size_t p = first_push; p < pushes; ++p) {
      aggregate.keys.push_back(snapshot.aggregate_keys[p]);
      aggregate.grads.push_back(snapshot.aggregate_grads[p]);
    }
    for (size_t p = first_pusher; p < pushers; ++p) {
      aggregate.pushers.insert(static_cast<int>(snapshot.aggregate_pushers[p]));
    }
    if (held_back) held->push_back({ShardSnapshot::HeldBack(clock), one.keys[0], one.grads[0]});
  }
  if (pushes != snapshot.aggregate_keys.size() || pushers != snapshot.aggregate_pushers.size()) {
    return "it carries more than its counts say";
  }
  return "";
}

absl::Status Shard::Restore(const ShardSnapshot& snapshot, int64_t first_row, bool last,
                            int64_t cut) {
  const std::string what = absl::StrCat("a snapshot of table '", table_.name, "' shard ", index_);
  auto invalid = [&what](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  constexpr size_t kFields = ShardSnapshot::kTrainerFields;
  if (snapshot.trainers.size() % kFields != 0 ||
      (last ? snapshot.counters.size() != ShardSnapshot::kCounters : !snapshot.counters.empty()) ||
      snapshot.aggregates.size() % 3 != 0 ||
      snapshot.aggregate_keys.size() != snapshot.aggregate_grads.size()) {
    return invalid("its lists' lengths do not fit together");
  }
  std::map<int, Trainer> trainers;
  size_t next = 0;
  for (size_t i = 0; i < snapshot.trainers.size(); i += kFields) {
    const int64_t* f = snapshot.trainers.data() + i;
    Trainer& t = trainers[static_cast<int>(f[0])];
    t.incarnation = f[1];
    t.clock = f[2];
    t.live = f[3] != 0;
    t.sequences_below = f[4];
    const size_t first = next;
    if (!Take(f[5], snapshot.sequences_above.size(), &next)) {
      return invalid(absl::StrCat("trainer ", f[0], " holds more sequences than it carries"));
    }
    t.sequences_above.insert(snapshot.sequences_above.begin() + first,
                             snapshot.sequences_above.begin() + next);
  }
  std::map<int64_t, Aggregate> aggregates;
  std::vector<HeldPush> held;
  if (std::string why = ReadAggregates(snapshot, &aggregates, &held); !why.empty()) {
    return invalid(why);
  }
  if (next != snapshot.sequences_above.size())
    return invalid("it carries more than its counts say");
  MutexLock lock(&mu_);
  if (log_->last() != 0 || restored_through_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": restored onto a replica that made changes already"));
  }
  if (auto ok = rows_.Restore(snapshot, first_row); !ok.ok()) return ok;
  if (!last) return absl::OkStatus();
  for (const auto& [clock, aggregate] : aggregates) {
    for (size_t p = 0; p < aggregate.keys.size(); ++p) {
      if (auto ok = CheckRows(aggregate.keys[p], aggregate.grads[p]); !ok.ok()) {
        return invalid(absl::StrCat("the aggregate of clock ", clock, ": ", ok.message()));
      }
    }
  }
  for (const HeldPush& push : held) {
    if (auto ok = CheckRows(push.keys, push.grads); !ok.ok()) {
      return invalid(absl::StrCat("a push held back: ", ok.message()));
    }
  }
  const int64_t* counters = snapshot.counters.data();
  if (counters[4] < -1 || (counters[5] != 0 && (counters[5] != 1 || counters[4] < 0)) ||
      (counters[4] < 0 && !held.empty())) {
    return invalid("its checkpoint cut does not fit together");
  }
  trainers_ = std::move(trainers);
  aggregates_ = std::move(aggregates);
  applied_clock_ = counters[0];
  stats_.pushes_applied = counters[1];
  stats_.duplicates = counters[2];
  last_push_clock_ = counters[3];
  cut_ = counters[4];
  cut_held_ = counters[5] != 0;
  saved_clock_ = counters[6];
  failed_clock_ = counters[7];
  held_ = std::move(held);
  restored_through_ = cut;
  return absl::OkStatus();
}

}  // namespace tessera::ps
