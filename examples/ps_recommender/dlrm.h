// The recommender's model, in DLRM's shape (Naumov et al., 2019): a bottom
// MLP over the dense features, one embedding per categorical field, their
// pairwise dot products (the feature interactions), and a top MLP from the
// interactions and the bottom MLP's output to a click logit.
//
// The model is explicit parameter lists, as the parameter server holds
// them: the embedding rows a batch uses come from sparse tables, the MLPs'
// weights from dense ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::examples {

struct DlrmShape {
  int64_t fields = 0;   // categorical features, an embedding table each: the data's
  int64_t dense = 0;    // real features: the data's
  int64_t dim = 16;     // an embedding's width, and the bottom MLP's output
  int64_t hidden = 64;  // both MLPs' hidden width
};

struct DenseParameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> fan_in_shape;  // its layer's weight's
};

// The MLPs' parameters, in the order DlrmForward takes them.
std::vector<DenseParameter> DlrmDenseParameters(const DlrmShape& shape);

// Click logits [B] from the dense parameters, the dense features [B, dense]
// and one embedding [B, dim] per field.
at::Tensor DlrmForward(const DlrmShape& shape, const std::vector<at::Tensor>& dense_params,
                       const at::Tensor& dense, const std::vector<at::Tensor>& embeddings);

}  // namespace tessera::examples
