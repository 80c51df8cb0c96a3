#include "examples/common/cnn.h"

#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace tessera::examples {
namespace {

at::Tensor Uniform(at::IntArrayRef shape, int64_t fan_in, at::Generator& generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return at::empty(shape).uniform_(-bound, bound, generator).set_requires_grad(true);
}

}  // namespace

std::vector<at::Tensor> InitCnn(uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {
      Uniform({32, 1, 3, 3}, 1 * 9, generator),   Uniform({32}, 1 * 9, generator),
      Uniform({64, 32, 3, 3}, 32 * 9, generator), Uniform({64}, 32 * 9, generator),
      Uniform({128, 1600}, 1600, generator),      Uniform({128}, 1600, generator),
      Uniform({10, 128}, 128, generator),         Uniform({10}, 128, generator),
  };
}

at::Tensor CnnFeatures(at::ArrayRef<at::Tensor> p, const at::Tensor& images) {
  at::Tensor x = at::max_pool2d(at::relu(at::conv2d(images, p[0], p[1])), {2, 2});
  return at::max_pool2d(at::relu(at::conv2d(x, p[2], p[3])), {2, 2});
}

at::Tensor CnnClassifier(at::ArrayRef<at::Tensor> p, const at::Tensor& features) {
  at::Tensor x = at::relu(at::linear(features.flatten(1), p[0], p[1]));
  return at::linear(x, p[2], p[3]);
}

at::Tensor CnnForward(const std::vector<at::Tensor>& p, const at::Tensor& images) {
  const at::ArrayRef<at::Tensor> all(p);
  return CnnClassifier(all.slice(kCnnFeatureParams),
                       CnnFeatures(all.slice(0, kCnnFeatureParams), images));
}

}  // namespace tessera::examples
