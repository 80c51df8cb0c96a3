#include "examples/hybrid_ddp_rpc/hybrid_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <stdexcept>

#include "dist_autograd/dist_autograd.h"
#include "dist_optim/parameter_guard.h"
#include "rref/remote.h"

namespace tessera::examples {

at::Tensor PatchWords(const at::Tensor& images) {
  const int64_t n = images.size(0);
  // Quadrant means [N, 14, 14], quantised to levels 0..3.
  at::Tensor levels = at::clamp(at::avg_pool2d(images, {2, 2}).squeeze(1) * 4, 0, 3)
                          .to(at::kLong);
  // Each 4x4 patch = 2x2 quadrants: pattern = l00 + 4 l01 + 16 l10 + 64 l11.
  at::Tensor q = levels.reshape({n, 7, 2, 7, 2}).permute({0, 1, 3, 2, 4}).reshape({n, 49, 4});
  at::Tensor pattern = q.select(2, 0) + q.select(2, 1) * 4 + q.select(2, 2) * 16 +
                       q.select(2, 3) * 64;
  return at::arange(kPatchWords, at::kLong).unsqueeze(0) * 256 + pattern;
}

EmbeddingTable::EmbeddingTable(int64_t rows, int64_t dim, int64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  weight_ = (at::randn({rows, dim}, generator) * 0.1).set_requires_grad(true);
}

at::Tensor EmbeddingTable::Lookup(at::Tensor words) {
  const int64_t n = words.size(0);
  at::Tensor flat = words.reshape({-1});
  at::Tensor rows;
  {
    dist_optim::ParameterGuard guard({weight_});
    rows = weight_.index_select(0, flat);
  }
  at::Tensor bag = at::arange(n, at::kLong).repeat_interleave(words.size(1));
  return at::zeros({n, weight_.size(1)}).index_add(0, bag, rows);
}

std::vector<rref::RRef<at::Tensor>> EmbeddingTable::ParameterRRefs(rpc::CallContext& ctx) {
  return rref::MakeRRefs(ctx, {weight_});
}

at::Tensor EmbeddingTable::Gradient(rpc::CallContext& ctx, int64_t context_id) {
  auto* autograd = &dist_autograd::DistAutograd::Of(*ctx.runtime);
  return autograd->GetGradients(context_id, {weight_}).front();
}

at::Tensor EmbeddingTable::Values() {
  dist_optim::ParameterGuard guard({weight_});
  return weight_.detach().clone();
}

void RegisterHybridClasses(rref::ClassRegistry& classes) {
  classes.Class<EmbeddingTable>("EmbeddingTable")
      .Constructor<int64_t, int64_t, int64_t>()
      .Method("lookup", &EmbeddingTable::Lookup)
      .Method("parameter_rrefs", &EmbeddingTable::ParameterRRefs)
      .Method("gradient", &EmbeddingTable::Gradient)
      .Method("values", &EmbeddingTable::Values);
}

}  // namespace tessera::examples
