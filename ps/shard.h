// Shard: one shard of one table on its server — its rows, the pushes it has
// applied (each once), and the clocks its consistency needs.
//
// Note [Parameter-server consistency]: every trainer has a clock per table
// (0 at first; PsClient::Clock() advances it and tells every shard, in one
// message per shard, even those the trainer did not touch). A pull or push
// carries the clock it was made at.
//   - Synchronous: a push of clock c is added to clock c's aggregate and
//     acknowledged; once every live trainer has ended clock c, the
//     aggregate (summed per key, divided by the trainers that took part in
//     c) is applied once, and a pull at clock c+1 — which waits for exactly
//     that — sees it. PyTorch's batch-updating parameter server.
//   - Bounded staleness τ: a push is applied at once; a pull at clock c
//     waits until every live trainer has reached c − τ. τ = 0 keeps the
//     trainers in step without aggregating.
//   - Asynchronous: pushes apply at once, pulls never wait.
// A trainer that fails or leaves stops counting (its pushes already taken
// are applied); a waiting pull gives up at its call's deadline naming the
// trainers it waited for. A trainer that joins late, or a new incarnation,
// starts with the current rows (Hello): in a synchronous table at the
// first clock not yet applied, which it then takes part in; otherwise at
// the furthest live trainer's clock, so as not to hold the others back.
// The trainers of a synchronous clock — the divisor of its average — are
// those that pushed in it or ended it.
//
// Note [Exactly-once pushes]: a push carries (trainer, incarnation,
// sequence). The shard remembers which sequences of the trainer's current
// incarnation it took, so a push sent again (a retry after a lost answer)
// is acknowledged without being applied twice; a push from an older
// incarnation than one the shard has seen is refused. A push is applied
// whole or not at all: it is checked before anything changes.
//
// Thread-safety: thread-safe; pulls that must wait complete later, from
// whichever call or timer releases them, never under the shard's lock.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/deadline_timer.h"
#include "common/future.h"
#include "common/mutex.h"
#include "ps/row_store.h"
#include "ps/table_options.h"

namespace tessera::ps {

// Who sent a request: the trainer's rank and incarnation.
struct Sender {
  int rank = -1;
  int64_t incarnation = 0;
};

struct ShardStats {
  int64_t rows = 0;
  int64_t pushes_applied = 0;  // taken (sync: into an aggregate), each once
  int64_t duplicates = 0;      // sent again, acknowledged, not applied
  int64_t clock = 0;           // sync: clocks applied; else the slowest live trainer's
};

class Shard : public std::enable_shared_from_this<Shard> {
 public:
  // `trainers`: the ranks whose clocks count from the start. Made with
  // std::make_shared: a waiting pull's deadline holds a weak reference.
  Shard(TableOptions table, int64_t index, int64_t shards, std::vector<int> trainers,
        DeadlineTimer* timer);

  // The rows of `keys` as of `clock` (Note [Parameter-server consistency]),
  // waiting at most until `deadline`.
  Future<at::Tensor> Pull(const Sender& from, int64_t clock, const at::Tensor& keys,
                          absl::Time deadline);
  // Takes `grads` ([n, dim]) for `keys` (Note [Exactly-once pushes]).
  absl::Status Push(const Sender& from, int64_t sequence, int64_t clock, const at::Tensor& keys,
                    const at::Tensor& grads);
  // The trainer is at `clock` now: it ended every clock before.
  absl::Status Clock(const Sender& from, int64_t clock);
  // A trainer (new, restarted) starts here: returns the clock it starts at.
  absl::StatusOr<int64_t> Hello(const Sender& from);
  // Incarnation `incarnation` of the trainer failed or left: it no longer
  // holds the clocks back (a newer incarnation that said hello already is
  // not touched: the notice of the old one's end may come after it).
  void TrainerGone(int rank, int64_t incarnation);

  ShardStats Stats() const;
  // Every row this shard holds (RowStore::Values).
  at::Tensor Values() const;
  const TableOptions& table() const { return table_; }

 private:
  struct Trainer {
    int64_t incarnation = 0;
    int64_t clock = 0;
    bool live = true;
    int64_t sequences_below = 0;        // every sequence below this was taken
    std::set<int64_t> sequences_above;  // and these
  };
  struct Aggregate {
    std::vector<at::Tensor> keys, grads;
    std::set<int> pushers;
  };
  struct Waiter {
    int64_t clock;
    at::Tensor slots;
    Promise<at::Tensor> rows;
    uint64_t id;
  };
  using Ready = std::vector<std::pair<Promise<at::Tensor>, absl::StatusOr<at::Tensor>>>;

  absl::Status CheckSender(const Sender& from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InvalidArgument unless `grads` is [keys, dim] of floats and every key is this shard's.
  absl::Status CheckRows(const at::Tensor& keys, const at::Tensor& grads) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the trainer's push `sequence` was taken already; records it if not.
  bool SeenBefore(Trainer& trainer, int64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sums `grads` per distinct key, divides by `divisor`, applies.
  absl::Status ApplySummed(const at::Tensor& keys, const at::Tensor& grads, double divisor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slowest live trainer's clock (its own clock when none is live).
  int64_t SlowestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The clock a pull may read at: sync, the clocks applied; else the slowest's + τ.
  int64_t ReadableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sync: applies the aggregate of every clock all live trainers ended.
  void ApplyClocksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies what may be applied; then hands the waiters that may read now
  // to `ready`.
  void AdvanceLocked(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire(uint64_t id);
  std::string SlowTrainersLocked(int64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TableOptions table_;
  const int64_t index_;
  DeadlineTimer* const timer_;
  mutable Mutex mu_;
  RowStore rows_ ABSL_GUARDED_BY(mu_);
  std::map<int, Trainer> trainers_ ABSL_GUARDED_BY(mu_);
  int64_t applied_clock_ ABSL_GUARDED_BY(mu_) = 0;                // sync: clocks below applied
  std::map<int64_t, Aggregate> aggregates_ ABSL_GUARDED_BY(mu_);  // sync: by clock
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  ShardStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::ps
