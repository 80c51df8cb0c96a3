#include "examples/resnet_ddp/resnet.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace tessera::examples {
namespace {

torch::nn::Conv2d Conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
  conv1_ = register_module("conv1", Conv3x3(in, out, stride));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(out));
  conv2_ = register_module("conv2", Conv3x3(out, out, 1));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(out));
  shortcut_ = register_module("shortcut", torch::nn::Sequential());
  if (stride != 1 || in != out) {
    shortcut_->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
    shortcut_->push_back(torch::nn::BatchNorm2d(out));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
  y = bn2_->forward(conv2_->forward(y));
  return torch::relu(y + (shortcut_->is_empty() ? x : shortcut_->forward(x)));
}

ResNet18Impl::ResNet18Impl(int64_t width, int64_t classes) {
  stem_ = register_module("stem", Conv3x3(1, width, 1));
  stem_bn_ = register_module("stem_bn", torch::nn::BatchNorm2d(width));
  stages_ = register_module("stages", torch::nn::Sequential());
  int64_t in = width;
  for (int64_t stage = 0; stage < 4; ++stage) {
    const int64_t out = width << stage;
    stages_->push_back(BasicBlock(in, out, stage == 0 ? 1 : 2));
    stages_->push_back(BasicBlock(out, out, 1));
    in = out;
  }
  classifier_ = register_module("classifier", torch::nn::Linear(in, classes));
}

torch::Tensor ResNet18Impl::forward(const torch::Tensor& images) {
  torch::Tensor x = torch::relu(stem_bn_->forward(stem_->forward(images)));
  x = stages_->forward(x);
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return classifier_->forward(x);
}

}  // namespace tessera::examples
