#include "ddp/powersgd_hook.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::ddp {

// What a bucket keeps from one pass to the next.
struct PowerSgdHook::BucketState {
  std::vector<std::vector<int64_t>> shapes;  // of its gradients: the layout it was built for
  int64_t passes = 0;
  at::Tensor error;            // error feedback, like the bucket's flat tensor
  std::vector<at::Tensor> qs;  // per compressed gradient, m x r (warm start)
  at::Generator generator;     // for fresh Qs without warm start
};

namespace {

// Per gradient of the bucket: its n x m matrix view, or undefined if it
// travels uncompressed.
struct Layout {
  std::vector<at::Tensor> matrices;      // compressed ones
  std::vector<at::Tensor> uncompressed;  // views, packed for one allreduce
};

Layout LayoutOf(const GradBucket& bucket, int64_t rank, double rate) {
  Layout layout;
  for (const at::Tensor& g : bucket.gradients) {
    const int64_t n = g.dim() >= 2 ? g.size(0) : 0;
    const int64_t m = n > 0 ? g.numel() / n : 0;
    if (n > 0 && PowerSgdHook::Compresses(n, m, rank, rate)) {
      layout.matrices.push_back(g.view({n, m}));
    } else {
      layout.uncompressed.push_back(g);
    }
  }
  return layout;
}

// Gram-Schmidt on the columns of `p` (n x r), in place.
void Orthonormalize(at::Tensor& p) {
  for (int64_t i = 0; i < p.size(1); ++i) {
    at::Tensor column = p.select(1, i);
    column.div_(column.norm() + 1e-8);
    if (i + 1 < p.size(1)) {
      at::Tensor rest = p.narrow(1, i + 1, p.size(1) - i - 1);
      rest.sub_(at::matmul(column.unsqueeze(1), at::matmul(column.unsqueeze(0), rest)));
    }
  }
}

// Copies the pieces of `packed` back into `views`.
void Unpack(const at::Tensor& packed, const std::vector<at::Tensor>& views) {
  int64_t offset = 0;
  for (const at::Tensor& view : views) {
    view.copy_(packed.narrow(0, offset, view.numel()).view(view.sizes()));
    offset += view.numel();
  }
}

at::Tensor Pack(const std::vector<at::Tensor>& pieces, const at::Tensor& like) {
  std::vector<at::Tensor> flat;
  for (const auto& piece : pieces) flat.push_back(piece.reshape({-1}));
  return flat.empty() ? like.new_empty({0}) : at::cat(flat);
}

}  // namespace

PowerSgdHook::PowerSgdHook(PowerSgdOptions options)
    : options_(options), tail_(collectives::Work::Ready(std::monostate{})) {
  if (options_.matrix_rank < 1) throw StatusError(absl::InvalidArgumentError("PowerSGD: matrix_rank must be >= 1"));
}

PowerSgdHook::~PowerSgdHook() = default;

std::string PowerSgdHook::name() const { return absl::StrCat("powersgd:", options_.matrix_rank); }

bool PowerSgdHook::Compresses(int64_t n, int64_t m, int64_t rank, double min_compression_rate) {
  const int64_t r = std::min({n, m, rank});
  return static_cast<double>(r * (n + m)) * min_compression_rate < static_cast<double>(n * m);
}

collectives::Work PowerSgdHook::Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) {
  MutexLock lock(&mu_);
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& g : bucket.gradients) shapes.push_back(g.sizes().vec());
  auto& state = buckets_[bucket.index];
  if (state == nullptr || state->shapes != shapes) {  // new, or buckets were rebuilt
    state = std::make_shared<BucketState>();
    state->shapes = std::move(shapes);
    state->generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed + bucket.index);
  }
  const bool compress = state->passes++ >= options_.start_step;
  // After the previous bucket's collectives, in the same order everywhere.
  tail_ = tail_.Then([this, bucket, &group, state,
                      compress](const absl::StatusOr<std::monostate>& before) -> collectives::Work {
    if (!before.ok()) return collectives::Work::Ready(before.status());
    if (compress) return Compress(bucket, group, state);
    return Allreduce(group, bucket.flat, collectives::ReduceOp::kAverage);
  });
  return tail_;
}

// One bucket's compression between its phases (see Note [PowerSGD]).
struct PowerSgdHook::Compression {
  GradBucket bucket;
  std::shared_ptr<BucketState> state;
  Layout layout;
  at::Tensor input;   // this rank's gradients plus the error, for the next error
  at::Tensor packed;  // the uncompressed gradients, averaged in place
  std::vector<at::Tensor> ps;
  at::Tensor p_all, q_all;
  collectives::Work packed_done = collectives::Work::Ready(std::monostate{});
  collectives::Work p_done = collectives::Work::Ready(std::monostate{});
};

collectives::Work PowerSgdHook::Compress(const GradBucket& bucket, collectives::ProcessGroup& group,
                                         const std::shared_ptr<BucketState>& state) {
  auto step = Begin(bucket, group, state);
  return step->p_done
      .Then([this, step, &group](const absl::StatusOr<std::monostate>& p_ok) -> collectives::Work {
        if (!p_ok.ok()) return collectives::Work::Ready(p_ok.status());
        return ExchangeQ(*step, group);
      })
      .Then([this, step, world = group.size()](
                const absl::StatusOr<std::monostate>& done) -> absl::StatusOr<std::monostate> {
        if (!done.ok()) return done;
        Finish(*step, world);
        return std::monostate{};
      });
}

// Error feedback, P = M Q for every matrix; issues the uncompressed pack's
// allreduce, then P's.
std::shared_ptr<PowerSgdHook::Compression> PowerSgdHook::Begin(
    const GradBucket& bucket, collectives::ProcessGroup& group,
    const std::shared_ptr<BucketState>& state) {
  auto step = std::make_shared<Compression>();
  step->bucket = bucket;
  step->state = state;
  step->layout = LayoutOf(bucket, options_.matrix_rank, options_.min_compression_rate);
  if (options_.error_feedback) {
    if (!state->error.defined()) state->error = at::zeros_like(bucket.flat);
    bucket.flat.add_(state->error);
    step->input = bucket.flat.clone();
  }
  if (state->qs.empty() || !options_.warm_start) {
    state->qs.clear();
    for (const auto& matrix : step->layout.matrices) {
      const int64_t r = std::min({matrix.size(0), matrix.size(1), options_.matrix_rank});
      state->qs.push_back(at::randn({matrix.size(1), r}, state->generator, bucket.flat.options()));
    }
  }
  step->packed = Pack(step->layout.uncompressed, bucket.flat);
  for (size_t i = 0; i < step->layout.matrices.size(); ++i) {
    step->ps.push_back(at::matmul(step->layout.matrices[i], state->qs[i]));
  }
  step->p_all = Pack(step->ps, bucket.flat);
  step->packed_done = Allreduce(group, step->packed, collectives::ReduceOp::kAverage);
  step->p_done = Allreduce(group, step->p_all, collectives::ReduceOp::kSum);
  return step;
}

// P's columns orthonormalised, Q = M^T P, Q allreduced; completes once Q
// and the uncompressed pack are both in.
collectives::Work PowerSgdHook::ExchangeQ(Compression& step, collectives::ProcessGroup& group) {
  Unpack(step.p_all, step.ps);
  std::vector<at::Tensor> qs;
  for (size_t i = 0; i < step.ps.size(); ++i) {
    Orthonormalize(step.ps[i]);
    qs.push_back(at::matmul(step.layout.matrices[i].t(), step.ps[i]));
  }
  step.q_all = Pack(qs, step.bucket.flat);
  return WhenAllOk(std::vector<collectives::Work>{
                       Allreduce(group, step.q_all, collectives::ReduceOp::kSum), step.packed_done})
      .Then([](const absl::StatusOr<bool>& all) -> absl::StatusOr<std::monostate> {
        if (!all.ok()) return all.status();
        return std::monostate{};
      });
}

// M ~ P Q^T written into the bucket, the pack unpacked, the error kept.
void PowerSgdHook::Finish(Compression& step, int world) {
  Unpack(step.q_all.div_(world), step.state->qs);  // the average Q: next step's warm start
  for (size_t i = 0; i < step.ps.size(); ++i) {
    step.layout.matrices[i].copy_(at::matmul(step.ps[i], step.state->qs[i].t()));
  }
  Unpack(step.packed, step.layout.uncompressed);
  if (options_.error_feedback) step.state->error = step.input - step.bucket.flat;
}

collectives::Work PowerSgdHook::Allreduce(collectives::ProcessGroup& group,
                                          const at::Tensor& tensor, collectives::ReduceOp op) {
  bytes_ += tensor.numel() * tensor.element_size();
  if (tensor.numel() == 0) return collectives::Work::Ready(std::monostate{});
  return group.Allreduce(tensor, op);
}

}  // namespace tessera::ddp
