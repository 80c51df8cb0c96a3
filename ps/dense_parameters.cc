#include "ps/dense_parameters.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace tessera::ps {
namespace {

int64_t Numel(c10::IntArrayRef shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

TableOptions DenseTableFor(std::string name, c10::IntArrayRef shape, c10::IntArrayRef fan_in_shape,
                           uint64_t seed, int64_t row_width) {
  const int64_t numel = Numel(shape);
  const int64_t fan_in =
      (fan_in_shape.empty() || fan_in_shape[0] == 0) ? 1 : Numel(fan_in_shape) / fan_in_shape[0];
  const double bound = 1 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  const int64_t width = std::max<int64_t>(1, std::min(row_width, numel));
  TableOptions table = TableOptions::Dense(std::move(name), (numel + width - 1) / width, width);
  table.init = Initializer::Uniform(-bound, bound, seed);
  return table;
}

at::Tensor ToRows(const at::Tensor& value, const TableOptions& table) {
  at::Tensor rows = at::zeros({table.rows * table.dim}, value.options());
  rows.narrow(0, 0, value.numel()).copy_(value.reshape(-1));
  return rows.view({table.rows, table.dim});
}

void CopyFromRows(const at::Tensor& rows, at::Tensor& value) {
  value.detach().view(-1).copy_(rows.reshape(-1).narrow(0, 0, value.numel()));
}

}  // namespace tessera::ps
