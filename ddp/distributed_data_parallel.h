// DistributedDataParallel: replicas of a torch::nn::Module, one per rank,
// that end every backward pass with the same averaged gradients.
//
//   auto ddp = DistributedDataParallel::Create(model, group.get(), {});
//   for (...) {
//     (*ddp)->SyncBuffers();                 // if the model has buffers
//     auto loss = loss_fn(model->forward(x), y);
//     optimizer.zero_grad();
//     loss.backward();                       // gradients averaged meanwhile
//     optimizer.step();
//   }
//
// At creation, every rank must hold parameters of the same dtypes and
// shapes (the first mismatch is an error naming it), and rank 0's parameters and buffers are
// copied to all. See Reducer for how gradients are averaged; NoSync()
// accumulates gradients locally until the guard is destroyed, and the next
// synchronised backward averages the sum.
//
// Uneven inputs (ranks with different numbers of batches) need a Join, or
// the ranks still training wait for the missing one until the timeout:
//
//   {
//     auto join = ddp->Join();
//     for (auto& batch : my_shard) { ...forward, backward, step... }
//     TESSERA_RETURN_IF_ERROR(join.Finish());  // shadows the others' steps
//   }
//
// See ddp/join.h, see Note [Joining with uneven inputs].
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "ddp/join.h"
#include "ddp/reducer.h"

namespace tessera::ddp {

struct DdpOptions {
  double bucket_cap_mb = 25;
  // The first bucket (the last layers' gradients) closes sooner, so its
  // allreduce starts early in backward (ddp/bucket_assignment.h).
  double first_bucket_cap_mb = 1;
  // How buckets are averaged (ddp/comm_hook.h); null: one allreduce each.
  std::shared_ptr<CommHook> comm_hook;
  // Bound on each collective wait; zero: DefaultTimeout() (common/timeouts.h).
  absl::Duration timeout = absl::ZeroDuration();
  // See Reducer. Without find_unused_parameters a parameter that gets no
  // gradient still averages correctly (as zero), but its bucket is only
  // sent when backward ends.
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

class DistributedDataParallel {
 public:
  // Checks that every rank's replica has the same parameters (names,
  // shapes) and copies rank 0's values and buffers to all. Throws
  // StatusError naming the rank and parameter that differ, or the failure.
  static std::unique_ptr<DistributedDataParallel> Create(std::shared_ptr<torch::nn::Module> module,
                                                         collectives::ProcessGroup* group,
                                                         DdpOptions options = {});

  torch::nn::Module& module() { return *module_; }
  size_t num_buckets() const { return reducer_->num_buckets(); }
  ReducerPassStats last_pass() const { return reducer_->last_pass(); }

  // Copies rank 0's buffers (e.g. batch-norm statistics) to every rank
  // (inside a Join: the highest rank's still training). Throws StatusError.
  void SyncBuffers();

  // Gradient accumulation without communication, while the guard lives.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer* reducer) : reducer_(reducer) { reducer_->set_sync(false); }
    ~NoSyncGuard() { reducer_->set_sync(true); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer* reducer_;
  };
  NoSyncGuard NoSync() { return NoSyncGuard(reducer_.get()); }

  // Training with uneven inputs while the guard lives: every rank enters
  // the Join at the same point, and calls Finish() when it runs out of
  // inputs. One Join at a time.
  class JoinGuard {
   public:
    // This rank is out of inputs: takes part in the other ranks' remaining
    // steps until every rank has joined, then every rank leaves with the
    // parameters and buffers of the last ones to train. The Join ends here,
    // also when it fails (a failed collective, or a rank out of inputs
    // under throw_on_early_termination: FailedPrecondition naming it) —
    // thrown as StatusError; TryFinish returns it.
    void Finish();
    absl::Status TryFinish();
    // Without Finish(): finishes (logging a failure), unless an exception is
    // unwinding — then it only ends the Join, as PyTorch's `with` block.
    ~JoinGuard();
    JoinGuard(const JoinGuard&) = delete;
    JoinGuard& operator=(const JoinGuard&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit JoinGuard(DistributedDataParallel* ddp);
    DistributedDataParallel* const ddp_;
    const int exceptions_at_entry_;
    bool finished_ = false;
  };
  // Throws StatusError (FailedPrecondition) inside another Join.
  JoinGuard Join(JoinOptions options = {});

 private:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          collectives::ProcessGroup* group, DdpOptions options);

  std::vector<at::Tensor> Buffers();
  // The joined rank's loop (see Note [Joining with uneven inputs]).
  absl::Status ShadowUntilAllJoined();
  void LeaveJoin();

  std::shared_ptr<torch::nn::Module> module_;
  collectives::ProcessGroup* const group_;
  const DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::shared_ptr<JoinTracker> join_;  // inside a Join
};

}  // namespace tessera::ddp
