#include "tests/pipeline/test_stages.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tanh.h>

namespace tessera::testing {
namespace {

// A linear layer's weight and bias, drawn from a generator seeded by `seed`.
std::vector<at::Tensor> Linear(int64_t in, int64_t out, int64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {(at::randn({out, in}, generator) * 0.5).set_requires_grad(true),
          (at::randn({out}, generator) * 0.1).set_requires_grad(true)};
}

pipeline::StageModel LinearStage(int64_t in, int64_t out, int64_t seed, bool tanh) {
  std::vector<at::Tensor> params = Linear(in, out, seed);
  return {params, [params, tanh](const at::Tensor& x) {
            at::Tensor y = at::addmm(params[1], x, params[0].t());
            return tanh ? at::tanh(y) : y;
          }};
}

}  // namespace

std::map<std::string, pipeline::StageFactory> TestStageFactories() {
  return {{"front", [](int64_t seed) { return LinearStage(6, 8, seed, /*tanh=*/true); }},
          {"hidden", [](int64_t seed) { return LinearStage(8, 8, seed, /*tanh=*/true); }},
          {"back", [](int64_t seed) { return LinearStage(8, 3, seed, /*tanh=*/false); }}};
}

}  // namespace tessera::testing
