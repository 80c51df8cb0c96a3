// SyncBatchNorm: batch normalisation over the whole batch of all ranks,
// the C++ counterpart of torch.nn.SyncBatchNorm.
//
// With DDP each rank sees only its shard of a batch; a plain BatchNorm then
// normalises with the shard's statistics — noisy when shards are small (a
// few images per process), and different on every rank. SyncBatchNorm
// normalises with the mean and variance of the union of the shards:
//
//   forward:  each rank computes its shard's count, mean and sum of squared
//             deviations per channel; one allgather; every rank combines
//             them (Chan et al.'s parallel variance — no catastrophic
//             cancellation, shards of different sizes weigh by their count);
//   backward: each rank sums dy and dy·(x − mean) over its shard per
//             channel; one allreduce; the input gradient uses the global
//             sums. The weight and bias gradients stay local — DDP averages
//             them with the rest.
//
// Running statistics (training) are updated from the global batch on every
// rank alike (the variance unbiased, over the global count), so replicas
// stay identical. In eval mode with running statistics nothing is
// communicated. Forward and backward are collectives: every rank of the
// group must run them in the same order (as with DDP's own allreduces).
//
// Use it where the model would use BatchNorm1d/2d/3d: it takes inputs of
// shape (N, C, *) in float, double, bfloat16 (also with float parameters,
// the kernel's mixed-precision mode) or Half (computed in float on CPU,
// where LibTorch has no Half batch_norm); statistics are combined and
// gradients summed in float at least. A failed collective (a dead rank, the timeout) throws
// std::runtime_error naming it, from forward or from backward().
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "absl/time/time.h"
#include "collectives/process_group.h"

namespace tessera::ddp {

struct SyncBatchNormOptions {
  explicit SyncBatchNormOptions(int64_t num_features) : num_features(num_features) {}
  int64_t num_features;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  // Bound on each collective; zero: DefaultTimeout() (common/timeouts.h).
  absl::Duration timeout = absl::ZeroDuration();
};

class SyncBatchNormImpl : public torch::nn::Module {
 public:
  // `group` must outlive the module.
  SyncBatchNormImpl(SyncBatchNormOptions options, collectives::ProcessGroup* group);

  at::Tensor forward(const at::Tensor& input);

  const SyncBatchNormOptions& options() const { return options_; }

  at::Tensor weight;  // undefined unless affine
  at::Tensor bias;
  at::Tensor running_mean;  // undefined unless track_running_stats
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  // forward() once Half inputs are widened.
  at::Tensor Normalise(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias);

  const SyncBatchNormOptions options_;
  collectives::ProcessGroup* const group_;
};

TORCH_MODULE(SyncBatchNorm);

}  // namespace tessera::ddp
