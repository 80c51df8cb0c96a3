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
// Replication: a shard's primary numbers each change it makes (OpLog,
// ps/op_log.h) and its backups Replay the same changes in the same order:
// a change is a function of the shard's state and the change alone, so
// every replica holds the same bits (Digest). Pulls change nothing — a
// sparse row never pushed is read as its initial value, not made — so only
// the primary serves them.
//
// Thread-safety: thread-safe; pulls that must wait complete later, from
// whichever call or timer releases them, never under the shard's lock.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
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
#include "ps/op_log.h"
#include "ps/row_store.h"
#include "ps/shard_snapshot.h"
#include "ps/table_options.h"

namespace tessera::ps {

// Who sent a request: the trainer's rank and incarnation.
struct Sender {
  int rank = -1;
  int64_t incarnation = 0;
};

// A change to a shard, as its primary made it and its backups repeat it.
struct ShardOp {
  // kCut, kRelease: a checkpoint's cut at `clock` (see Note [Sharded
  // checkpoints], ps/shard_cut.cc).
  enum class Kind : int64_t {
    kHello = 0,
    kPush = 1,
    kClock = 2,
    kGone = 3,
    kCut = 4,
    kRelease = 5
  };
  static constexpr int64_t kLastKind = static_cast<int64_t>(Kind::kRelease);
  Kind kind = Kind::kPush;
  Sender from;
  int64_t sequence = 0;  // kPush
  int64_t clock = 0;     // kPush, kClock, kCut, kRelease
  at::Tensor keys, grads;
};

// What a change on the primary waits for before it is answered: every
// backup has applied change `lsn`. `is_new`: the change is this one, to be
// sent to the backups; otherwise it was made before (a push sent again) or
// changed nothing, and `lsn` is the last change made, which covers it.
struct Logged {
  int64_t lsn = 0;
  bool is_new = false;
};

struct ShardStats {
  int64_t rows = 0;
  int64_t pushes_applied = 0;  // taken (sync: into an aggregate), each once
  int64_t duplicates = 0;      // sent again, acknowledged, not applied
  int64_t clock = 0;           // sync: clocks applied; else the slowest live trainer's
};

class Shard : public std::enable_shared_from_this<Shard> {
 public:
  // `trainers`: the ranks whose clocks count from the start; `log`, the
  // numbering of the changes to this shard's every table on this replica.
  // Made with std::make_shared: a waiting pull's deadline holds a weak
  // reference.
  Shard(TableOptions table, int64_t index, int64_t shards, std::vector<int> trainers,
        std::shared_ptr<OpLog> log, DeadlineTimer* timer);

  // The rows of `keys` as of `clock` (see Note [Parameter-server consistency]),
  // waiting at most until `deadline`.
  Future<at::Tensor> Pull(const Sender& from, int64_t clock, const at::Tensor& keys,
                          absl::Time deadline);
  // The changes, on the primary.
  // Takes `grads` ([n, dim]) for `keys` (see Note [Exactly-once pushes]).
  absl::StatusOr<Logged> Push(const Sender& from, int64_t sequence, int64_t clock,
                              const at::Tensor& keys, const at::Tensor& grads);
  // The trainer is at `clock` now: it ended every clock before.
  absl::StatusOr<Logged> Clock(const Sender& from, int64_t clock);
  // A trainer (new, restarted) starts here: sets `start` to the clock it
  // starts at.
  absl::StatusOr<Logged> Hello(const Sender& from, int64_t* start);
  // Incarnation `incarnation` of the trainer failed or left: it no longer
  // holds the clocks back (a newer incarnation that said hello already is
  // not touched: the notice of the old one's end may come after it).
  Logged TrainerGone(int rank, int64_t incarnation);
  // A checkpoint's cut (see Note [Sharded checkpoints], ps/shard_cut.cc): the
  // rows as the changes of every clock below `clock` left them, and no
  // later ones. Sets `agreed` to the clock this shard cuts at: `clock`, or
  // the earliest it still can if it applied a later clock's changes
  // already, or a pending cut's if that is later (a cut only moves later).
  // FailedPrecondition while another clock's cut is held.
  absl::StatusOr<Logged> Cut(int64_t clock, int64_t* agreed);
  // The clock of the cut reached and held on this replica — its rows are
  // the cut's, later changes are held back — or -1.
  int64_t HeldCut() const;
  // Ends the cut at `clock`: applies what it held back. `written`: whether
  // the primary wrote the cut's copy first.
  absl::StatusOr<Logged> Release(int64_t clock, bool written);
  // Completes once a cut at `clock` or later was written; fails if the one
  // at `clock` could not be (the primary's log says why), or at once with
  // FailedPrecondition if this shard holds no cut at `clock` or later to
  // wait for (lost with every replica: PsClient::Checkpoint asks anew).
  Future<std::monostate> Saved(int64_t clock);
  // A new shard that holds a checkpoint's rows (ps/checkpoint_files.h)
  // starts at `clock`: its trainers there, clocks below applied.
  void ResumeAt(int64_t clock);
  // Whether this shard holds live trainer `rank` at a clock below `clock`:
  // behind what the trainer's own request says (a shard restored from a
  // checkpoint; see Note [Trainers ahead of a restored shard], ps/ps_server.cc).
  bool Behind(int rank, int64_t clock) const;
  // `reached` runs, outside the lock, when a change made on this replica
  // as primary reaches a cut (a promoted backup asks HeldCut instead).
  void OnCutReached(std::function<void(int64_t clock)> reached);

  // On a backup: makes `op`, change `lsn` of the replica, as the primary
  // made it (OpLog::Follow orders them); one a snapshot held is skipped.
  absl::Status Replay(const ShardOp& op, int64_t lsn);

  // A copy of everything this shard holds (ps/shard_snapshot.h), and `cut`:
  // the last change to its replica (OpLog) when the copy was taken. Every
  // change of this table numbered up to `cut` is in the copy, none after.
  // Taken a few MiB at a time, the lock released in between: pushes go
  // on meanwhile (RowStore::BeginSnapshot's copy-on-write).
  ShardSnapshot Snapshot(int64_t* cut);
  // On a new replica, before any change: holds `snapshot`, taken at `cut`,
  // and Replay skips the changes numbered up to it. In parts: each part's
  // rows go at `first_row` (ShardSnapshot::Rows, in order); the `last`
  // part carries the rest (ShardSnapshot::WithoutRows) and the cut.
  // InvalidArgument when it is not a snapshot of this table's shard (the
  // replica is then dropped).
  absl::Status Restore(const ShardSnapshot& snapshot, int64_t cut) {
    return Restore(snapshot, 0, /*last=*/true, cut);
  }
  absl::Status Restore(const ShardSnapshot& part, int64_t first_row, bool last, int64_t cut);

  // A hash of everything the changes made (rows, optimizer state, trainers'
  // clocks and sequences, aggregates): equal on replicas that made the same
  // changes.
  uint64_t Digest() const;
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
  struct HeldPush {
    int64_t clock;
    at::Tensor keys, grads;
  };
  struct Aggregate {
    std::vector<at::Tensor> keys, grads;
    std::set<int> pushers;
  };
  struct Waiter {
    int64_t clock;
    at::Tensor keys;
    Promise<at::Tensor> rows;
    uint64_t id;
  };
  using Ready = std::vector<std::pair<Promise<at::Tensor>, absl::StatusOr<at::Tensor>>>;

  // How far past a trainer's clock, as this shard knows it, a Clock() or a
  // push may go: PsClient moves its clock by one (or to where another shard's
  // Hello started it), and its pushes may overtake its last Clock(); more is
  // a broken or hostile client. A checkpoint's cut, as far past the
  // furthest trainer.
  static constexpr int64_t kMaxClockAdvance = 1 << 16;

  absl::Status CheckSender(const Sender& from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The changes themselves, on any replica: whether `op` changed anything.
  // `answer`: a hello's start clock, a cut's agreed clock.
  absl::StatusOr<bool> MakeLocked(const ShardOp& op, int64_t* answer, Ready* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> HelloLocked(const Sender& from, int64_t* start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> PushLocked(const ShardOp& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> ClockLocked(const Sender& from, int64_t clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GoneLocked(int rank, int64_t incarnation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> CutLocked(int64_t clock, int64_t* agreed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReleaseLocked(int64_t clock, bool written) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NotWritten(int64_t clock) const;
  // Restore's reading of a snapshot's aggregates (and of the pushes a cut
  // held back): what does not fit, or "".
  static std::string ReadAggregates(const ShardSnapshot& snapshot,
                                    std::map<int64_t, Aggregate>* aggregates,
                                    std::vector<HeldPush>* held);
  // Applies the held pushes of clocks below `clock`, in order.
  void ApplyHeldLocked(int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the pending cut is reached now: then it is held.
  void CheckCutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On the primary: makes `op`, numbers it if it changed anything, and
  // frees the pulls it allows (and tells of a cut it reached).
  absl::StatusOr<Logged> Make(const ShardOp& op, int64_t* answer) ABSL_LOCKS_EXCLUDED(mu_);
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
  const std::shared_ptr<OpLog> log_;
  DeadlineTimer* const timer_;
  mutable Mutex mu_;
  RowStore rows_ ABSL_GUARDED_BY(mu_);
  std::map<int, Trainer> trainers_ ABSL_GUARDED_BY(mu_);
  int64_t applied_clock_ ABSL_GUARDED_BY(mu_) = 0;                // sync: clocks below applied
  std::map<int64_t, Aggregate> aggregates_ ABSL_GUARDED_BY(mu_);  // sync: by clock
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  ShardStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t restored_through_ ABSL_GUARDED_BY(mu_) = 0;  // Restore's cut
  // The checkpoint's cut: its clock (-1: none), whether reached (held), the
  // pushes of clocks at or past it held back meanwhile (not synchronous:
  // a synchronous table's later clocks wait as aggregates), in order; the
  // latest clock of a push taken. Replicated state: in the digest and the
  // snapshot.
  int64_t cut_ ABSL_GUARDED_BY(mu_) = -1;
  bool cut_held_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<HeldPush> held_ ABSL_GUARDED_BY(mu_);
  int64_t last_push_clock_ ABSL_GUARDED_BY(mu_) = -1;
  // The latest cut written, and the latest that could not be.
  int64_t saved_clock_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t failed_clock_ ABSL_GUARDED_BY(mu_) = -1;
  // Set when a change reaches the cut; Make then runs on_cut_ after the lock.
  bool cut_news_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(int64_t)> on_cut_ ABSL_GUARDED_BY(mu_);
  // Saved() calls waiting, by clock; completed by Make after the lock.
  std::vector<std::pair<int64_t, Promise<std::monostate>>> saved_waits_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<Promise<std::monostate>, absl::Status>> saved_ready_ ABSL_GUARDED_BY(mu_);
  Mutex snapshot_mu_ ABSL_ACQUIRED_BEFORE(mu_);        // one Snapshot at a time
};

}  // namespace tessera::ps
