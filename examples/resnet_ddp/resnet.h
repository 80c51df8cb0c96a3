// ResNet-18 (He et al. 2016: four stages of two basic blocks each, widths
// w, 2w, 4w, 8w) adapted to Fashion-MNIST's 1x28x28 images: a 3x3 stem with
// stride 1 and no max-pool (28 -> 28 -> 14 -> 7 -> 4), global average
// pooling, 10 classes. `width` 64 is the original's; the example's default
// is narrower for a 2-core CPU.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace tessera::examples {

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};  // empty when shapes match
};
TORCH_MODULE(BasicBlock);

class ResNet18Impl : public torch::nn::Module {
 public:
  explicit ResNet18Impl(int64_t width = 16, int64_t classes = 10);
  torch::Tensor forward(const torch::Tensor& images);  // N x 1 x 28 x 28 -> N x classes

 private:
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  torch::nn::Sequential stages_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace tessera::examples
