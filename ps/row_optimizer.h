// RowOptimizer: the optimizer a parameter server applies to the rows a push
// touched, with its state kept beside the rows (OptimizerOptions,
// ps/table_options.h). Rows are addressed by slot (ps/row_store.h).
//
// Thread-safety: none; its shard serialises every call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ps/table_options.h"

namespace tessera::ps {

class RowOptimizer {
 public:
  RowOptimizer(OptimizerOptions options, int64_t dim);

  // Makes room for `capacity` rows of state (new rows start from zero).
  void Reserve(int64_t capacity);
  // values[slots] moves against grads ([n, dim]); `slots` are distinct.
  void Apply(at::Tensor& values, const at::Tensor& slots, const at::Tensor& grads);
  // `hash` extended by the state of the first `rows` rows.
  uint64_t Digest(uint64_t hash, int64_t rows) const;
  // Room for the state of `rows` rows (for a snapshot), and rows
  // first..first+n-1 of it copied there; Restore sets rows first..first+rows-1
  // from that form (room reserved), InvalidArgument naming what does not fit.
  std::vector<at::Tensor> EmptyState(int64_t rows) const;
  void CopyState(int64_t first, int64_t n, std::vector<at::Tensor>& into) const;
  absl::Status Restore(const std::vector<at::Tensor>& state, int64_t first, int64_t rows);

 private:
  OptimizerOptions options_;
  int64_t dim_;
  at::Tensor accumulator_;  // Adagrad: [capacity], mean squared gradient summed
  at::Tensor m_, v_;        // Adam: [capacity, dim]
  at::Tensor steps_;        // Adam: [capacity] doubles, each row's own step count
};

}  // namespace tessera::ps
