// ActivationStash: what a pipeline stage keeps of each micro-batch between
// its forward and its backward (see Note [Pipeline schedules], schedule.h) —
// the input it ran on and the output with its autograd graph, which holds
// the activations the backward needs. Counted, so that the peak number of
// micro-batches alive at once on a stage can be read (and tested).
//
// Thread-safety: thread-safe; forwards and backwards of several
// micro-batches run concurrently on a stage.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "common/mutex.h"

namespace tessera::pipeline {

struct StashedMicroBatch {
  at::Tensor input;   // requires grad where the previous stage wants its gradient
  at::Tensor output;  // attached to the graph from `input` and the parameters
};

class ActivationStash {
 public:
  // Keeps micro-batch `micro` of autograd context `context`. First drops
  // what is kept for contexts `is_live` says are gone (a step that failed
  // part-way leaves its micro-batches here until then).
  void Put(int64_t context, int64_t micro, StashedMicroBatch entry,
           const std::function<bool(int64_t context)>& is_live);
  // Takes micro-batch `micro` of `context` out; nullopt if not kept.
  std::optional<StashedMicroBatch> Take(int64_t context, int64_t micro);

  // Micro-batches kept now, and the most kept at once since the last reset.
  int64_t live() const;
  int64_t peak() const;
  void ResetPeak();

 private:
  mutable Mutex mu_;
  std::map<std::pair<int64_t, int64_t>, StashedMicroBatch> kept_ ABSL_GUARDED_BY(mu_);
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::pipeline
