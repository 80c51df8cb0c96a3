#include "ddp/sync_batch_norm.h"

#include <ATen/ops/batch_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/timeouts.h"

namespace tessera::ddp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the autograd function needs besides its differentiable inputs.
struct Settings {
  collectives::ProcessGroup* group;
  double eps;
  double momentum;
  absl::Duration timeout;
  at::Tensor running_mean;  // updated in place when defined
  at::Tensor running_var;
};

void Check(collectives::Work work, const char* what, absl::Duration timeout) {
  ThrowIfError(
      Annotate(work.Wait(timeout).status(), absl::StrCat("SyncBatchNorm: ", what, " failed")));
}

// Dimensions reduced per channel: all but 1.
std::vector<int64_t> ReducedDims(const at::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against (N, C, *).
at::Tensor PerChannel(const at::Tensor& v, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = v.numel();
  return v.view(shape);
}

// x * scale + shift per channel, in one pass of LibTorch's fused
// inference-mode batch-norm kernel (mean 0, variance 1, eps 0) — several
// times faster here than broadcasting element-wise operators. The
// statistics take scale's dtype: a bfloat16 x with float scale and shift is
// the kernel's mixed-precision mode.
at::Tensor ChannelAffine(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift) {
  const int64_t channels = x.size(1);
  return at::batch_norm(x, scale, shift, at::zeros({channels}, scale.options()),
                        at::ones({channels}, scale.options()), /*training=*/false, /*momentum=*/0,
                        /*eps=*/0, /*cudnn_enabled=*/false);
}

// The dtype LibTorch's CPU batch_norm takes statistics in: the parameters'
// (float with a bfloat16 input is its mixed-precision mode), else the input's.
at::ScalarType StatsType(const at::Tensor& input, const at::Tensor& weight) {
  return weight.defined() ? weight.scalar_type() : input.scalar_type();
}

struct GlobalStats {
  at::Tensor mean;
  at::Tensor biased_var;
  double count;
};

// Count, mean and sum of squared deviations of every rank's shard, combined
// (Chan et al.): M2 = sum over shards of (m2_r + n_r (mean_r - mean)^2).
GlobalStats GatherStats(const at::Tensor& input, const Settings& settings) {
  const int64_t channels = input.size(1);
  const double count = static_cast<double>(input.numel() / std::max<int64_t>(channels, 1));
  const auto compute = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor x = input.to(compute);
  at::Tensor mean = at::zeros({channels}, x.options());
  at::Tensor m2 = at::zeros({channels}, x.options());
  if (count > 0) {
    // Two passes, as LibTorch's own batch norm: var_mean's one-pass
    // (Welford) reduction over dimensions (0, 2, ...) is several times slower.
    const std::vector<int64_t> dims = ReducedDims(x);
    mean = x.mean(dims);
    m2 = ChannelAffine(x, at::ones({channels}, x.options()), -mean).square_().sum(dims);
  }
  const at::Tensor mine = at::cat({at::full({1}, count, x.options()), mean, m2});
  const int world = settings.group->size();
  at::Tensor all = at::empty({world * mine.numel()}, x.options());
  Check(settings.group->Allgather(mine, all), "gathering batch statistics", settings.timeout);
  const at::Tensor rows = all.view({world, mine.numel()});
  const at::Tensor counts = rows.select(1, 0).unsqueeze(1);       // [world, 1]
  const at::Tensor means = rows.narrow(1, 1, channels);           // [world, C]
  const at::Tensor m2s = rows.narrow(1, 1 + channels, channels);  // [world, C]
  const double total = counts.sum().item<double>();
  if (total == 0)
    throw StatusError(absl::InvalidArgumentError("SyncBatchNorm: every rank's batch is empty"));
  GlobalStats stats;
  stats.count = total;
  stats.mean = (means * counts).sum(0) / total;
  stats.biased_var = (m2s + counts * (means - stats.mean).pow(2)).sum(0) / total;
  return stats;
}

// The element-wise work goes through LibTorch's fused CPU kernels (the
// batch_norm_stats/elemt family PyTorch's SyncBatchNorm uses is CUDA-only
// in 1.13): normalising with given statistics is an inference-mode
// batch_norm, and the per-channel sums of backward come out of
// native_batch_norm_backward's weight and bias gradients.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const Settings& settings) {
    const GlobalStats stats = GatherStats(input, settings);
    if (settings.running_mean.defined()) {
      const double unbiased = stats.count > 1 ? stats.count / (stats.count - 1) : 1.0;
      const at::Tensor& running_mean = settings.running_mean;
      const at::Tensor& running_var = settings.running_var;
      running_mean.mul_(1 - settings.momentum)
          .add_(stats.mean.to(running_mean.scalar_type()), settings.momentum);
      running_var.mul_(1 - settings.momentum)
          .add_((stats.biased_var * unbiased).to(running_var.scalar_type()), settings.momentum);
    }
    const auto stats_type = StatsType(input, weight);
    const at::Tensor mean = stats.mean.to(stats_type);
    const at::Tensor var = stats.biased_var.to(stats_type);
    const at::Tensor invstd = (var + settings.eps).rsqrt();
    at::Tensor output = at::batch_norm(input, weight, bias, mean, var, /*training=*/false,
                                       /*momentum=*/0, settings.eps, /*cudnn_enabled=*/false);
    ctx->save_for_backward({input, weight, mean, invstd});
    // The group travels as an integer: saved_data holds only IValues.
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(settings.group));
    ctx->saved_data["timeout_us"] = absl::ToInt64Microseconds(settings.timeout);
    ctx->saved_data["count"] = stats.count;
    ctx->saved_data["eps"] = settings.eps;
    return output;
  }

  // grad_input = (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean))) invstd w, the
  // means over the global batch; written as a dy + b x + c per channel.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    auto* group = reinterpret_cast<collectives::ProcessGroup*>(
        static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    const absl::Duration timeout = absl::Microseconds(ctx->saved_data["timeout_us"].toInt());
    const double count = ctx->saved_data["count"].toDouble();

    const at::Tensor dy = grad_outputs[0].contiguous();
    // Local sums: bias gradient = sum dy, weight gradient = sum dy (x - mean) invstd.
    auto [unused, local_grad_weight, sum_dy] = at::native_batch_norm_backward(
        dy, input, weight, /*running_mean=*/{}, /*running_var=*/{}, mean, invstd,
        /*train=*/true, ctx->saved_data["eps"].toDouble(), {false, true, true});
    // Summed across ranks in float at least (bfloat16 sums would lose digits).
    const auto sum_type = invstd.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor sums = at::cat({sum_dy, local_grad_weight / invstd}).to(sum_type);
    Check(group->Allreduce(sums, collectives::ReduceOp::kSum), "reducing gradients", timeout);
    const int64_t channels = mean.numel();
    const at::Tensor mean_dy = sums.narrow(0, 0, channels) / count;
    const at::Tensor mean_dy_xmu = sums.narrow(0, channels, channels) / count;
    const at::Tensor invstd_wide = invstd.to(sum_type);
    const at::Tensor a = weight.defined() ? invstd_wide * weight.to(sum_type) : invstd_wide;
    const at::Tensor b = -a * invstd_wide * invstd_wide * mean_dy_xmu;
    const at::Tensor c = -a * mean_dy - b * mean.to(sum_type);
    at::Tensor grad_input = ChannelAffine(input, b, c);
    // (addcmul_ takes one dtype: a in grad_input's.)
    grad_input.addcmul_(dy, PerChannel(a.to(grad_input.scalar_type()), input));
    // Weight and bias gradients stay this shard's: DDP averages them.
    if (!weight.defined()) return {grad_input, at::Tensor(), at::Tensor(), at::Tensor()};
    return {grad_input, local_grad_weight, sum_dy, at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options, collectives::ProcessGroup* group)
    : options_(WithDefaultTimeout(options)), group_(group) {
  const int64_t c = options_.num_features;
  if (options_.affine) {
    weight = register_parameter("weight", at::ones({c}));
    bias = register_parameter("bias", at::zeros({c}));
  }
  if (options_.track_running_stats) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options_.num_features) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("SyncBatchNorm: expected an input of shape (N, ", options_.num_features,
                     ", *), got ", input.dim(), " dimensions",
                     input.dim() >= 2 ? absl::StrCat(" with ", input.size(1), " channels") : "")));
  }
  if (input.scalar_type() == at::kHalf && input.device().is_cpu()) {
    // LibTorch 1.13's CPU batch_norm has no Half kernel (its own BatchNorm
    // refuses Half there): compute in float, differentiably, and return Half.
    auto up = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
    return Normalise(up(input), up(weight), up(bias)).to(at::kHalf);
  }
  return Normalise(input, weight, bias);
}

at::Tensor SyncBatchNormImpl::Normalise(const at::Tensor& input, const at::Tensor& weight,
                                        const at::Tensor& bias) {
  if (!is_training() && options_.track_running_stats) {
    // A copy of the running statistics only when the module's dtype differs.
    const auto stats_type = StatsType(input, weight);
    return at::batch_norm(input, weight, bias, running_mean.to(stats_type),
                          running_var.to(stats_type), /*training=*/false, options_.momentum,
                          options_.eps, /*cudnn_enabled=*/false);
  }
  const bool update_running = is_training() && options_.track_running_stats;
  if (update_running) num_batches_tracked.add_(1);
  return SyncBatchNormFunction::apply(
      input, weight, bias,
      Settings{group_, options_.eps, options_.momentum, options_.timeout,
               update_running ? running_mean : at::Tensor(),
               update_running ? running_var : at::Tensor()});
}

}  // namespace tessera::ddp
