// The examples' CNN, written with ATen ops over an explicit list of
// parameters so that a forward pass can run on a snapshot of them:
// conv 1->32 (3x3), ReLU, max-pool 2; conv 32->64 (3x3), ReLU, max-pool 2;
// linear 1600->128, ReLU; linear 128->10. Initialised like torch.nn's
// layers (uniform within 1/sqrt(fan_in)).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tessera::examples {

// Leaves that require grad, in a fixed order.
std::vector<at::Tensor> InitCnn(uint64_t seed);

// Logits [N, 10] for images [N, 1, 28, 28].
at::Tensor CnnForward(const std::vector<at::Tensor>& params, const at::Tensor& images);

// The same in two parts, for pipeline stages: the convolutions (the first
// kCnnFeatureParams parameters) give features [N, 64, 5, 5], the linear
// layers (the rest) give logits.
inline constexpr size_t kCnnFeatureParams = 4;
at::Tensor CnnFeatures(at::ArrayRef<at::Tensor> conv_params, const at::Tensor& images);
at::Tensor CnnClassifier(at::ArrayRef<at::Tensor> linear_params, const at::Tensor& features);

}  // namespace tessera::examples
