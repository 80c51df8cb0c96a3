// Reducer: averages gradients across ranks while backward is still running.
//
// Parameters are grouped into buckets (ddp/bucket_assignment.h: by dtype, a
// small first bucket, then about `limits.cap_bytes` each) in reverse order
// of registration (roughly the order their gradients become ready). A hook
// on each parameter's gradient accumulator marks it ready; when a bucket is
// complete its gradients are gathered into one flat buffer and an averaging
// allreduce starts, overlapping the rest of backward. Buckets are launched
// strictly in index order, so every rank issues the same collectives in the
// same order. When backward ends (a callback queued on the autograd engine),
// buckets not yet launched — parameters that got no gradient this pass
// count as zero — are launched, all are awaited, and the averages are
// written back into each parameter's .grad. A failure (a rank died, a
// timeout) is thrown from backward() with its cause.
//
// Note [Bucket rebuild]: registration order is only a guess at backward's
// order (a module may register layers in another order than forward uses
// them), and a bucket waiting on a late gradient holds back every bucket
// after it. So the first synchronised pass records the order in which
// gradients really became ready, and at its end the buckets are assigned
// again in that order — rank 0's order, broadcast, since the assignment must
// be the same everywhere and ranks may run different control flow. As
// PyTorch's DDP does; later passes keep those buckets (with
// gradient_as_bucket_view, each .grad moves into its new bucket at the next
// pass's launch).
//
// find_unused_parameters: at the first hook of a pass, parameters whose
// accumulators are not in the engine's graph are marked ready at once, so
// their buckets need not wait for the end of backward.
//
// gradient_as_bucket_view: each .grad becomes a view into its bucket's flat
// buffer, so the engine accumulates straight into the bucket and the
// averages land in .grad without the two copies (as long as .grad is only
// zeroed, not replaced; a replaced .grad is copied in and re-viewed).
//
// Inside a distributed autograd backward (a dist_autograd::GradientSink is
// current when the hooks run) gradients are read from and written to the
// sink — the autograd context — instead of .grad, and the end-of-pass work
// is deferred with the sink. Hooks then fire after the local pass, so
// buckets do not overlap that pass's computation.
//
// Inside a Join (ddp/join.h) each synchronised pass starts with an
// announcement round, and a rank that has joined shadows the others' passes
// with ShadowPass().
//
// Thread-safety: hooks may fire on autograd threads; state is locked.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "common/mutex.h"
#include "ddp/bucket_assignment.h"
#include "ddp/comm_hook.h"
#include "ddp/join.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace tessera::ddp {

struct ReducerOptions {
  BucketLimits limits;
  absl::Duration timeout = absl::Seconds(60);
  std::shared_ptr<CommHook> comm_hook;  // how buckets are averaged; null: AllreduceHook()
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

// What the last synchronised backward pass did (for logging and tests).
struct ReducerPassStats {
  size_t buckets = 0;
  // Buckets whose allreduce started before the end of backward.
  size_t launched_during_backward = 0;
  // Parameters found outside the pass's graph (find_unused_parameters).
  size_t unused_parameters = 0;
  // Buckets whose allreduce started while some of the pass's gradients were
  // still to come: the ones that overlapped computation.
  size_t launched_before_last_gradient = 0;
};

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> parameters, collectives::ProcessGroup* group,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // While false, backward passes only accumulate gradients locally (no_sync).
  void set_sync(bool sync);
  // Inside a Join while set; null leaves it.
  void set_join(std::shared_ptr<JoinTracker> join);
  // A joined rank's part in a backward pass of the ranks still training: an
  // allreduce of zeros per bucket, and the bucket rebuild if they rebuild
  // now. Leaves this rank's gradients alone.
  absl::Status ShadowPass();
  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  ReducerPassStats last_pass() const;

  // Shared with the gradient hooks, which may outlive the Reducer.
  struct State;

 private:
  struct Bucket {
    std::vector<size_t> parameters;  // indices into parameters_
    std::vector<int64_t> offsets;    // of each parameter in `flat`
    at::Tensor flat;
    size_t pending = 0;
    std::optional<collectives::Work> work;
  };

  // The bucket as the communication hook sees it.
  GradBucket HookView(size_t index, const at::Tensor& flat) const;
  std::vector<at::Tensor> parameters_;
  // Note [Keep gradient accumulators alive]: a parameter's accumulator is
  // cached only weakly; unless we hold it, backward makes a new one without
  // our hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<State> state_;
  collectives::ProcessGroup* const group_;
  const ReducerOptions options_;
  const std::shared_ptr<CommHook> hook_;
};

}  // namespace tessera::ddp
