#include "examples/ps_recommender/click_data.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "ps/key_hash.h"

namespace tessera::examples {
namespace {

// The hidden model: fixed, so that data sets of any seed share it.
constexpr uint64_t kTruthSeed = 0x7e55e7a;
constexpr int64_t kTruthDim = 4;
constexpr double kTruthOffset = -1.2;  // about a quarter of the samples click

// A hidden value of (field, id, column), uniform in [-scale, scale).
double Hidden(int64_t field, int64_t id, int64_t column, double scale) {
  const double unit = ps::UnitFromKey(kTruthSeed + static_cast<uint64_t>(field),
                                      static_cast<uint64_t>(id), static_cast<uint64_t>(column));
  return scale * (2 * unit - 1);
}

}  // namespace

ClickData GenerateClicks(const ClickDataOptions& o) {
  std::vector<double> cdf(static_cast<size_t>(o.vocabulary));
  double total = 0;
  for (int64_t r = 0; r < o.vocabulary; ++r) {
    total += std::pow(static_cast<double>(r + 1), -o.zipf);
    cdf[static_cast<size_t>(r)] = total;
  }
  ClickData data;
  data.ids = at::empty({o.samples, o.fields}, at::kLong);
  data.dense = at::empty({o.samples, o.dense}, at::kFloat);
  data.clicks = at::empty({o.samples}, at::kFloat);
  data.truth = at::empty({o.samples}, at::kFloat);
  auto* ids = data.ids.data_ptr<int64_t>();
  auto* dense = data.dense.data_ptr<float>();
  auto* clicks = data.clicks.data_ptr<float>();
  auto* truth = data.truth.data_ptr<float>();
  std::mt19937_64 random(o.seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> hidden(static_cast<size_t>(o.fields * kTruthDim));
  for (int64_t i = 0; i < o.samples; ++i) {
    double logit = kTruthOffset;
    for (int64_t f = 0; f < o.fields; ++f) {
      const auto rank =
          std::upper_bound(cdf.begin(), cdf.end(), unit(random) * total) - cdf.begin();
      const int64_t id = std::min<int64_t>(rank, o.vocabulary - 1);
      ids[i * o.fields + f] = id;
      logit += Hidden(f, id, kTruthDim, 1.2);
      for (int64_t c = 0; c < kTruthDim; ++c) {
        hidden[static_cast<size_t>(f * kTruthDim + c)] = Hidden(f, id, c, 0.6);
      }
    }
    for (int64_t f = 0; f < o.fields; ++f) {
      for (int64_t g = f + 1; g < o.fields; ++g) {
        for (int64_t c = 0; c < kTruthDim; ++c) {
          logit += hidden[static_cast<size_t>(f * kTruthDim + c)] *
                   hidden[static_cast<size_t>(g * kTruthDim + c)];
        }
      }
    }
    for (int64_t j = 0; j < o.dense; ++j) {
      const double x = normal(random);
      dense[i * o.dense + j] = static_cast<float>(x);
      logit += x * Hidden(-1, 0, j, 0.5);
    }
    const double p = 1 / (1 + std::exp(-logit));
    truth[i] = static_cast<float>(p);
    clicks[i] = unit(random) < p ? 1.0F : 0.0F;
  }
  return data;
}

double Auc(const at::Tensor& scores, const at::Tensor& labels) {
  const at::Tensor s = scores.to(at::kDouble).contiguous();
  const at::Tensor l = labels.to(at::kDouble).contiguous();
  const auto* score = s.data_ptr<double>();
  const auto* label = l.data_ptr<double>();
  const auto n = static_cast<size_t>(s.numel());
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  // The rank-sum (Mann-Whitney) form; tied scores share their mean rank.
  double positive_ranks = 0, positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && score[order[j]] == score[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + j) + 1) / 2;
    for (size_t k = i; k < j; ++k) {
      if (label[order[k]] > 0.5) {
        positive_ranks += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace tessera::examples
