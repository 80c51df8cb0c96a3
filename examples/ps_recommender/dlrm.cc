#include "examples/ps_recommender/dlrm.h"

#include <ATen/ops/add.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/triu_indices.h>

namespace tessera::examples {

std::vector<DenseParameter> DlrmDenseParameters(const DlrmShape& s) {
  const int64_t features = s.fields + 1;  // the embeddings and the bottom MLP's output
  const int64_t top_in = s.dim + features * (features - 1) / 2;
  const std::vector<int64_t> bottom0{s.hidden, s.dense}, bottom1{s.dim, s.hidden},
      top0{s.hidden, top_in}, top1{1, s.hidden};
  return {{"bottom0.weight", bottom0, bottom0}, {"bottom0.bias", {s.hidden}, bottom0},
          {"bottom1.weight", bottom1, bottom1}, {"bottom1.bias", {s.dim}, bottom1},
          {"top0.weight", top0, top0},          {"top0.bias", {s.hidden}, top0},
          {"top1.weight", top1, top1},          {"top1.bias", {1}, top1}};
}

at::Tensor DlrmForward(const DlrmShape& s, const std::vector<at::Tensor>& p,
                       const at::Tensor& dense, const std::vector<at::Tensor>& embeddings) {
  const at::Tensor bottom =
      at::relu(at::linear(at::relu(at::linear(dense, p[0], p[1])), p[2], p[3]));
  std::vector<at::Tensor> features{bottom};
  features.insert(features.end(), embeddings.begin(), embeddings.end());
  const at::Tensor z = at::stack(features, 1);  // [B, fields + 1, dim]
  const int64_t n = s.fields + 1;
  const at::Tensor gram = at::bmm(z, z.transpose(1, 2)).reshape({-1, n * n});
  const at::Tensor pairs = at::triu_indices(n, n, 1);  // the products above the diagonal
  const at::Tensor interactions = gram.index_select(1, pairs[0].mul(n).add(pairs[1]));
  const at::Tensor top = at::relu(at::linear(at::cat({bottom, interactions}, 1), p[4], p[5]));
  return at::linear(top, p[6], p[7]).squeeze(1);
}

}  // namespace tessera::examples
