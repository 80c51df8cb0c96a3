// BatchPlan: who trains on what, decided by the parameter server.
//
// Note [Work handed out by the server]: trainers do not shard the data
// among themselves by rank — in an elastic job the set of trainers changes
// (a trainer dies and comes back, another joins, one leaves early). The
// server holds the plan instead: each epoch is a seeded permutation of the
// training set cut into batches, numbered by a global step; a trainer
// leases the next batch, and its next request acknowledges the one before.
// A batch leased to a trainer that failed or left goes back to the front of
// the queue. So every batch of every epoch is trained exactly once (a batch
// whose step completed just before its trainer died may be trained twice),
// whoever is there — which is what keeps an elastic run's accuracy that of
// an undisturbed one.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tessera::examples {

struct Batch {
  int epoch = 0;                 // 0-based
  int64_t step = 0;              // global, 0-based: epoch * steps_per_epoch + i
  std::vector<int64_t> indices;  // into the training set
};

class BatchPlan {
 public:
  // `max_steps` > 0 caps the steps of each epoch.
  BatchPlan(int64_t samples, int64_t batch, int epochs, uint64_t seed, int64_t max_steps = 0);

  // Acknowledges `trainer`'s last lease and, if `more`, leases it the next
  // batch. A lease of an older incarnation of `trainer` (a process that
  // died mid-batch, which this one replaced) goes back to the queue instead. While every remaining
  // batch is leased to others (one of whom may yet fail) it waits, up to `deadline`. nullopt: all
  // batches are done (or `more` is false); DeadlineExceeded at the deadline. `acked` (if not null)
  // is set to the steps done after this call's acknowledgement, or 0 when it acknowledged nothing.
  absl::StatusOr<std::optional<Batch>> Next(const std::string& trainer, int incarnation, bool more,
                                            absl::Time deadline, int64_t* acked = nullptr);
  // `trainer`'s `incarnation` failed or left: its lease goes back to the
  // queue (not a newer incarnation's: the notice may come late).
  void Release(const std::string& trainer, int incarnation);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t steps_total() const { return steps_per_epoch_ * epochs_; }
  int64_t steps_done() const;
  // Every trainer's acknowledged steps, by name.
  std::map<std::string, int64_t> StepsByTrainer() const;

  // For checkpoints: what is done, as {steps done, next fresh step, the
  // steps before it not done yet...}; a lease counts as not done.
  std::vector<int64_t> Position() const;
  // Resumes from a Position(), before any lease. Throws StatusError
  // (DataLoss) if it does not fit this plan.
  void Restore(const std::vector<int64_t>& position);

 private:
  struct Lease {
    int incarnation = 0;
    int64_t step = 0;
  };
  std::vector<int64_t> IndicesOf(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReturnLocked(std::map<std::string, Lease>::iterator lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t samples_;
  const int64_t batch_;
  const int epochs_;
  const uint64_t seed_;
  const int64_t steps_per_epoch_;
  mutable Mutex mu_;
  CondVar changed_;
  std::deque<int64_t> returned_ ABSL_GUARDED_BY(mu_);  // released leases, first
  int64_t next_fresh_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);  // by trainer
  std::map<std::string, int64_t> done_by_ ABSL_GUARDED_BY(mu_);
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::vector<int64_t>> permutations_ ABSL_GUARDED_BY(mu_);  // by epoch
};

}  // namespace tessera::examples
