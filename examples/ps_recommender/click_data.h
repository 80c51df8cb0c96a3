// A click data set with a known best AUC, for the recommender example.
//
// Each sample has `fields` categorical features (ids drawn from a Zipf law
// over `vocabulary` ids per field, as real click logs have: a few ids are
// everywhere, most are rare) and `dense` real features. Its label is drawn
// from a hidden ground-truth model of the same family the example trains —
// a bias per id, pairwise dot products of hidden id vectors, a linear term
// in the dense features — so the ground truth's own click probabilities
// score the best AUC any model can reach on the data, and the example
// prints its AUC beside that one.
//
// Generation depends only on the options: every trainer makes the same data
// set and takes its own share.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tessera::examples {

struct ClickDataOptions {
  int64_t samples = 0;
  int64_t fields = 4;
  int64_t vocabulary = 100000;  // ids per field
  double zipf = 1.1;            // P(rank r) ∝ r^-zipf
  int64_t dense = 8;
  uint64_t seed = 1;  // the data set's; the hidden model's is fixed
};

struct ClickData {
  at::Tensor ids;     // [samples, fields] int64, in [0, vocabulary)
  at::Tensor dense;   // [samples, dense] float
  at::Tensor clicks;  // [samples] float, 0 or 1
  at::Tensor truth;   // [samples] float: the hidden model's click probability
};

ClickData GenerateClicks(const ClickDataOptions& options);

// The area under the ROC curve of `scores` for `labels` (0/1): the chance
// that a random click scores above a random non-click (ties count half).
double Auc(const at::Tensor& scores, const at::Tensor& labels);

}  // namespace tessera::examples
