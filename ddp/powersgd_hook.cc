#include "ddp/powersgd_hook.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

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
    : options_(options), tail_(Work::Ready(std::monostate{})) {
  if (options_.matrix_rank < 1) throw std::invalid_argument("PowerSGD: matrix_rank must be >= 1");
}

PowerSgdHook::~PowerSgdHook() = default;

std::string PowerSgdHook::name() const { return absl::StrCat("powersgd:", options_.matrix_rank); }

bool PowerSgdHook::Compresses(int64_t n, int64_t m, int64_t rank, double min_compression_rate) {
  const int64_t r = std::min({n, m, rank});
  return static_cast<double>(r * (n + m)) * min_compression_rate < static_cast<double>(n * m);
}

Work PowerSgdHook::Reduce(const GradBucket& bucket, ProcessGroup& group) {
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
                      compress](const absl::StatusOr<std::monostate>& before) -> Work {
    if (!before.ok()) return Work::Ready(before.status());
    if (compress) return Compress(bucket, group, state);
    bytes_ += bucket.flat.numel() * bucket.flat.element_size();
    return group.Allreduce(bucket.flat, ReduceOp::kAverage);
  });
  return tail_;
}

Work PowerSgdHook::Compress(const GradBucket& bucket, ProcessGroup& group,
                            const std::shared_ptr<BucketState>& state) {
  const Layout layout = LayoutOf(bucket, options_.matrix_rank, options_.min_compression_rate);
  at::Tensor input;  // this rank's gradients with the error added, for the next error
  if (options_.error_feedback) {
    if (!state->error.defined()) state->error = at::zeros_like(bucket.flat);
    bucket.flat.add_(state->error);
    input = bucket.flat.clone();
  }
  if (state->qs.empty() || !options_.warm_start) {
    state->qs.clear();
    for (const auto& matrix : layout.matrices) {
      const int64_t r = std::min({matrix.size(0), matrix.size(1), options_.matrix_rank});
      state->qs.push_back(at::randn({matrix.size(1), r}, state->generator, bucket.flat.options()));
    }
  }
  // Issued now, in this order: the uncompressed pack, then P.
  at::Tensor packed = Pack(layout.uncompressed, bucket.flat);
  std::vector<at::Tensor> ps;
  for (size_t i = 0; i < layout.matrices.size(); ++i) {
    ps.push_back(at::matmul(layout.matrices[i], state->qs[i]));
  }
  at::Tensor p_all = Pack(ps, bucket.flat);
  bytes_ += (packed.numel() + p_all.numel()) * bucket.flat.element_size();
  const auto done_now = Work::Ready(std::monostate{});
  Work flat_done = packed.numel() > 0 ? group.Allreduce(packed, ReduceOp::kAverage) : done_now;
  Work p_done = p_all.numel() > 0 ? group.Allreduce(p_all, ReduceOp::kSum) : done_now;
  const int world = group.size();
  return p_done.Then([this, bucket, &group, state, layout, ps, p_all, packed, flat_done, input,
                      world](const absl::StatusOr<std::monostate>& p_ok) mutable -> Work {
    if (!p_ok.ok()) return Work::Ready(p_ok.status());
    Unpack(p_all, ps);
    std::vector<at::Tensor> qs;
    for (size_t i = 0; i < ps.size(); ++i) {
      Orthonormalize(ps[i]);
      qs.push_back(at::matmul(layout.matrices[i].t(), ps[i]));
    }
    at::Tensor q_all = Pack(qs, bucket.flat);
    bytes_ += q_all.numel() * bucket.flat.element_size();
    Work q_done =
        q_all.numel() > 0 ? group.Allreduce(q_all, ReduceOp::kSum) : Work::Ready(std::monostate{});
    return q_done
        .Then([flat_done](const absl::StatusOr<std::monostate>& q_ok) -> Work {
          if (!q_ok.ok()) return Work::Ready(q_ok.status());
          return flat_done;
        })
        .Then([this, bucket, state, layout, ps, q_all, packed, input, world](
                  const absl::StatusOr<std::monostate>& done) -> absl::StatusOr<std::monostate> {
          if (!done.ok()) return done;
          q_all.div_(world);
          int64_t offset = 0;
          for (size_t i = 0; i < ps.size(); ++i) {
            at::Tensor q = q_all.narrow(0, offset, state->qs[i].numel()).view(state->qs[i].sizes());
            offset += q.numel();
            state->qs[i].copy_(q);
            layout.matrices[i].copy_(at::matmul(ps[i], q.t()));
          }
          Unpack(packed, layout.uncompressed);
          if (options_.error_feedback) state->error = input - bucket.flat;
          return std::monostate{};
        });
  });
}

}  // namespace tessera::ddp
