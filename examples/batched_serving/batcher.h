// Batcher: gathers single requests from many callers into one batch, runs
// the model once on it and completes every caller's future with its own
// row — the server side of PyTorch's "batch-processing RPC" tutorial
// (@rpc.functions.async_execution), without blocking a server thread per
// call: the RPC handler returns the future Submit gives it.
//
// A batch runs when `max_batch` requests are waiting or `max_delay` has
// passed since the oldest arrived, whichever is first (latency stays
// bounded when few callers are left).
//
// Thread-safety: Submit from any thread; the model runs on the Batcher's
// own `threads` threads, one batch each at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/future.h"
#include "common/mutex.h"

namespace tessera::examples {

struct BatcherStats {
  int64_t requests = 0;
  int64_t batches = 0;
  int64_t mixed_batches = 0;  // holding requests of more than one caller
  int64_t largest_batch = 0;
};

class Batcher {
 public:
  using Model = std::function<at::Tensor(const at::Tensor& batch)>;
  Batcher(Model model, int64_t max_batch, absl::Duration max_delay, int threads = 1);
  ~Batcher();  // fails the requests still waiting
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `input` is one row (the model's input without the batch dimension);
  // `caller` only counts mixed batches. The future holds the model's row
  // for `input`, or the model's error.
  Future<at::Tensor> Submit(at::Tensor input, int caller);

  BatcherStats stats() const;

 private:
  struct Request {
    at::Tensor input;
    int caller;
    Promise<at::Tensor> answer;
    absl::Time arrived;
  };
  void Loop();
  void Run(std::vector<Request> batch);

  const Model model_;
  const int64_t max_batch_;
  const absl::Duration max_delay_;
  mutable Mutex mu_;
  CondVar changed_;
  std::deque<Request> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  BatcherStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace tessera::examples
