// Reducer: averages gradients across ranks while backward is still running.
//
// Parameters are grouped into buckets of about `bucket_cap_bytes`, in
// reverse order of registration (roughly the order their gradients become
// ready). A hook on each parameter's gradient accumulator marks it ready;
// when a bucket is complete its gradients are copied into one flat buffer
// and an averaging allreduce starts, overlapping the rest of backward.
// Buckets are launched strictly in index order, so every rank issues the
// same collectives in the same order. When backward ends (a callback queued
// on the autograd engine), buckets not yet launched — parameters that got
// no gradient this pass count as zero — are launched, all are awaited, and
// the averages are written back into each parameter's .grad. A failure (a
// rank died, a timeout) is thrown from backward() with its cause.
//
// Thread-safety: hooks may fire on autograd threads; state is locked.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "ddp/process_group.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace tessera::ddp {

// How a bucket travels: as is, or compressed to fp16 (half the bytes; the
// average is computed in fp16 and decompressed into the gradients).
enum class CommHook { kAllreduce, kFp16Compress };

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> parameters, ProcessGroup* group, size_t bucket_cap_bytes,
          absl::Duration timeout, CommHook hook = CommHook::kAllreduce);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // While false, backward passes only accumulate gradients locally (no_sync).
  void set_sync(bool sync);
  size_t num_buckets() const { return buckets_.size(); }

  // Shared with the gradient hooks, which may outlive the Reducer.
  struct State;

 private:
  struct Bucket {
    std::vector<size_t> parameters;  // indices into parameters_
    std::vector<int64_t> offsets;    // of each parameter in `flat`
    at::Tensor flat;
    at::Tensor wire;  // what is reduced: `flat`, or its fp16 copy
    size_t pending = 0;
    bool launched = false;
    std::optional<Work> work;
  };

  std::vector<at::Tensor> parameters_;
  // Note [Keep gradient accumulators alive]: a parameter's accumulator is
  // cached only weakly; unless we hold it, backward makes a new one without
  // our hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<State> state_;
  ProcessGroup* const group_;
  const absl::Duration timeout_;
  const CommHook hook_;
};

}  // namespace tessera::ddp
