// ShardSnapshot: everything one table's shard holds — its rows and their
// optimizer state, its trainers' clocks and the sequences they pushed, the
// synchronous aggregates not yet applied, its counters — as tensors and
// integer lists, for a message or a file. A shard restored from it
// (Shard::Restore) holds the same bits (the same Shard::Digest) as the one
// it was taken of (Shard::Snapshot).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tessera::ps {

struct ShardSnapshot {
  // Sparse: the key of each row, by slot; dense: empty (its range's keys).
  at::Tensor keys;
  at::Tensor values;                  // [rows, dim] floats
  std::vector<at::Tensor> optimizer;  // RowOptimizer::State of the rows
  // Per trainer: rank, incarnation, clock, live, sequences_below, and how
  // many of `sequences_above` are its own (theirs follow in trainer order).
  static constexpr size_t kTrainerFields = 6;
  std::vector<int64_t> trainers;
  std::vector<int64_t> sequences_above;
  // applied_clock, pushes applied, duplicates, the latest clock pushed,
  // the checkpoint's cut (-1: none), whether it is held, the latest cut
  // written and the latest not (ps/shard_cut.cc).
  static constexpr size_t kCounters = 8;
  std::vector<int64_t> counters;
  // Per synchronous aggregate: its clock, how many pushes it holds (their
  // keys and grads follow in `aggregate_keys`, `aggregate_grads`), how many
  // trainers pushed in it (their ranks follow in `aggregate_pushers`). Each
  // push a cut holds back comes as one of its own, of one push and no
  // pushers, its clock c written HeldBack(c) (negative), in order.
  static constexpr int64_t HeldBack(int64_t clock) { return -2 - clock; }
  std::vector<int64_t> aggregates;
  std::vector<int64_t> aggregate_pushers;
  std::vector<at::Tensor> aggregate_keys, aggregate_grads;

  // Rows [first, first + n) alone (views, no copy), the other lists empty:
  // a large shard travels in parts (Shard::Restore puts them together).
  ShardSnapshot Rows(int64_t first, int64_t n) const {
    ShardSnapshot part;
    part.keys = keys.numel() > 0 ? keys.narrow(0, first, n) : keys;
    part.values = values.narrow(0, first, n);
    for (const at::Tensor& state : optimizer) part.optimizer.push_back(state.narrow(0, first, n));
    return part;
  }
  // The same without rows: what Rows leaves out.
  ShardSnapshot WithoutRows() const {
    ShardSnapshot rest = Rows(0, 0);
    rest.trainers = trainers;
    rest.sequences_above = sequences_above;
    rest.counters = counters;
    rest.aggregates = aggregates;
    rest.aggregate_pushers = aggregate_pushers;
    rest.aggregate_keys = aggregate_keys;
    rest.aggregate_grads = aggregate_grads;
    return rest;
  }
  int64_t rows() const { return values.defined() ? values.size(0) : 0; }

  // The bytes of its tensors (for logs and measurements).
  int64_t bytes() const {
    int64_t n = 0;
    auto add = [&n](const at::Tensor& t) {
      if (t.defined()) n += static_cast<int64_t>(t.numel() * t.element_size());
    };
    add(keys);
    add(values);
    for (const auto* list : {&optimizer, &aggregate_keys, &aggregate_grads}) {
      for (const at::Tensor& t : *list) add(t);
    }
    return n;
  }
};

}  // namespace tessera::ps
