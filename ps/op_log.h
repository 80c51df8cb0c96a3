// OpLog: the order of the changes to one shard (every table's part of it)
// on one of its replicas (see Note [Parameter-server replication],
// ps/ps_server.h).
//
// On the primary, each change a table's shard makes — a push taken, a
// clock, a trainer's hello or end — gets the next log sequence number
// (Next(), under that table's lock, so one table's changes are numbered in
// the order they were made), and the log tracks which numbers every backup
// has applied: Replicated(n) completes once each backup the shard map names
// confirmed n. On a backup, Follow runs the changes strictly in their
// numbers' order, whatever order their messages came in, so every replica
// applies each table's changes in the primary's order and holds the same
// bits.
//
// Thread-safety: thread-safe. Futures complete outside the log's lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/future.h"
#include "common/mutex.h"

namespace tessera::ps {

class OpLog {
 public:
  // --- the primary ---
  // The number of the change being made now.
  int64_t Next();
  // The last number given or applied: every change up to it is made here.
  int64_t last() const;
  // The backups the shard map names now; those gone no longer hold waits.
  void SetBackups(const std::vector<std::string>& backups);
  // `backup` has applied every change up to `lsn`. Kept for a server not
  // yet named a backup too (a joiner catching up): named one, it is waited
  // for from what it confirmed, not from nothing.
  void Confirm(const std::string& backup, int64_t lsn);
  // Completes once every backup applied the changes up to `lsn`.
  Future<std::monostate> Replicated(int64_t lsn);
  // Fails every wait, and every later one (this replica is no longer the
  // primary).
  void FailWaits(const absl::Status& status);

  // --- a backup ---
  // Runs `apply` as change `lsn` of the primary set at shard map epoch
  // `term`: now, if every change before it was applied; once they are, if
  // not; never twice (one applied already completes at once). The future
  // has `apply`'s status. A change of a primary older than one followed
  // already is refused (Aborted): that primary was replaced.
  Future<std::monostate> Follow(int64_t term, int64_t lsn, std::function<absl::Status()> apply);
  // This replica becomes the primary: the changes waiting for one before
  // them never come (their primary failed before sending it; none of them
  // was acknowledged), so they are dropped, failed with `status`, and it
  // follows no other primary from now on.
  void Promote(const absl::Status& status);

  // --- a new backup (re-replication) ---
  // Holds back every change from now on until StartAt: changes forwarded
  // before a snapshot is installed must not be applied to an empty replica.
  void Hold();
  // The snapshot installed holds every change up to `lsn`: those waiting
  // up to it complete at once, the others apply in order from lsn + 1.
  void StartAt(int64_t lsn);
  // Between Hold and StartAt.
  bool held() const;

 private:
  struct Pending {
    std::function<absl::Status()> apply;
    Promise<std::monostate> done;
  };
  using Ready = std::vector<std::pair<Promise<std::monostate>, absl::Status>>;
  // Applies the changes whose turn it is, in order.
  void Drain();
  // Hands the waits every backup confirmed to `ready`.
  void ReleaseLocked(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Complete(Ready& ready);

  // Held while a backup applies changes, never under mu_: a change runs
  // outside mu_ (it takes its table's lock, which the primary holds when it
  // calls Next()), yet one at a time, in order.
  Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  int64_t last_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);                       // FailWaits's, until Promote
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;                          // the newest primary followed
  bool held_ ABSL_GUARDED_BY(mu_) = false;                         // Hold, until StartAt
  std::map<std::string, int64_t> confirmed_ ABSL_GUARDED_BY(mu_);  // by backup
  std::map<std::string, int64_t> heard_ ABSL_GUARDED_BY(mu_);      // by any replica
  std::multimap<int64_t, Promise<std::monostate>> waits_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);  // a backup's, by lsn
};

}  // namespace tessera::ps
