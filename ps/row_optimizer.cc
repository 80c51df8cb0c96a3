#include "ps/row_optimizer.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/zeros.h>

#include <utility>
#include <vector>

namespace tessera::ps {

namespace {

// `state` grown to `capacity` rows, the new ones zero.
at::Tensor Grown(const at::Tensor& state, int64_t capacity, at::IntArrayRef row_shape,
                 at::ScalarType type) {
  std::vector<int64_t> shape = {capacity};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  if (!state.defined()) return at::zeros(shape, at::TensorOptions().dtype(type));
  if (state.size(0) >= capacity) return state;
  shape[0] = capacity - state.size(0);
  return at::cat({state, at::zeros(shape, state.options())});
}

}  // namespace

RowOptimizer::RowOptimizer(OptimizerOptions options, int64_t dim)
    : options_(std::move(options)), dim_(dim) {}

void RowOptimizer::Reserve(int64_t capacity) {
  switch (options_.kind) {
    case OptimizerOptions::Kind::kSgd:
      break;
    case OptimizerOptions::Kind::kAdagrad:
      accumulator_ = Grown(accumulator_, capacity, {}, at::kFloat);
      break;
    case OptimizerOptions::Kind::kAdam:
      m_ = Grown(m_, capacity, {dim_}, at::kFloat);
      v_ = Grown(v_, capacity, {dim_}, at::kFloat);
      // Double: 1 - 0.999^t in float is off by 1e-5 relative at t = 1.
      steps_ = Grown(steps_, capacity, {}, at::kDouble);
      break;
  }
}

void RowOptimizer::Apply(at::Tensor& values, const at::Tensor& slots, const at::Tensor& grads) {
  const double lr = options_.lr;
  switch (options_.kind) {
    case OptimizerOptions::Kind::kSgd:
      values.index_add_(0, slots, grads, -lr);
      return;
    case OptimizerOptions::Kind::kAdagrad: {
      // Row-wise: one accumulator per row, of the row's mean squared gradient.
      at::Tensor accumulated = accumulator_.index_select(0, slots) + grads.pow(2).mean(1);
      accumulator_.index_copy_(0, slots, accumulated);
      at::Tensor step = grads / (accumulated.sqrt() + options_.eps).unsqueeze(1);
      values.index_add_(0, slots, step, -lr);
      return;
    }
    case OptimizerOptions::Kind::kAdam: {
      // Lazy: only the rows pushed move, each bias-corrected by its own count.
      const double b1 = options_.beta1, b2 = options_.beta2;
      at::Tensor m = m_.index_select(0, slots) * b1 + grads * (1 - b1);
      at::Tensor v = v_.index_select(0, slots) * b2 + grads.pow(2) * (1 - b2);
      at::Tensor t = steps_.index_select(0, slots) + 1;
      m_.index_copy_(0, slots, m);
      v_.index_copy_(0, slots, v);
      steps_.index_copy_(0, slots, t);
      at::Tensor m_hat = m / (1 - at::pow(b1, t)).to(at::kFloat).unsqueeze(1);
      at::Tensor v_hat = v / (1 - at::pow(b2, t)).to(at::kFloat).unsqueeze(1);
      values.index_add_(0, slots, m_hat / (v_hat.sqrt() + options_.eps), -lr);
      return;
    }
  }
}

}  // namespace tessera::ps
