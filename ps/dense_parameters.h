// A model's parameter as a dense parameter-server table: its values
// flattened into rows of at most `row_width` (so that a large weight
// spreads over the servers), the last row zero-padded.
//
//   ps::TableOptions t = ps::DenseTableFor("fc1.weight", weight.sizes());
//   ps->Push(t.name, at::arange(t.rows, at::kLong), ps::ToRows(weight.grad(), t));
//   ps::CopyFromRows(ps->Pull(t.name, keys).Get(timeout), weight);
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "c10/util/ArrayRef.h"
#include "ps/table_options.h"

namespace tessera::ps {

inline constexpr int64_t kDenseRowWidth = 256;

// A dense table for a parameter of `shape`, initialised uniformly within
// ±1/sqrt(fan_in) as torch.nn's layers are (fan_in: the numel of
// `fan_in_shape` over its first dimension; a bias passes its weight's).
TableOptions DenseTableFor(std::string name, c10::IntArrayRef shape, c10::IntArrayRef fan_in_shape,
                           uint64_t seed, int64_t row_width = kDenseRowWidth);

// `value` as `table`'s rows ([rows, dim], zero-padded).
at::Tensor ToRows(const at::Tensor& value, const TableOptions& table);

// Copies `rows` (as ToRows made them) into `value`, in place and outside
// autograd.
void CopyFromRows(const at::Tensor& rows, at::Tensor& value);

}  // namespace tessera::ps
