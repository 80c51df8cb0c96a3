// TableOptions: what a parameter-server table is — its rows, how they start,
// the optimizer the servers apply to them and the consistency of its pulls
// and pushes (see Note [Parameter-server consistency], ps/shard.h).
//
//   ps::TableOptions embeddings = ps::TableOptions::Sparse("user_emb", 64);
//   embeddings.init = ps::Initializer::Uniform(-0.05, 0.05);
//   embeddings.optimizer = ps::OptimizerOptions::Adagrad(0.05);
//   embeddings.consistency = ps::Consistency::Bounded(4);
//
// A job declares the same tables on every worker (as it declares its model);
// the shard map in the store records each table's shape, and a trainer whose
// table differs from the servers' is refused with both shapes named.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tessera::ps {

// Dense: keys 0..rows-1, split over the shards in contiguous ranges (a model's
// parameters, flattened into rows of `dim`). Sparse: any int64 key, hashed to
// a shard, its row created on first touch (an embedding table).
enum class TableKind { kDense, kSparse };

// How a row starts: from its key alone (a counter-based generator), so that a
// row has the same initial value whichever server creates it.
struct Initializer {
  enum class Kind { kZeros, kUniform, kNormal };
  Kind kind = Kind::kZeros;
  double a = 0;  // uniform: low; normal: mean
  double b = 0;  // uniform: high; normal: standard deviation
  uint64_t seed = 0;

  static Initializer Zeros() { return {}; }
  static Initializer Uniform(double low, double high, uint64_t seed = 0) {
    return {Kind::kUniform, low, high, seed};
  }
  static Initializer Normal(double mean, double stddev, uint64_t seed = 0) {
    return {Kind::kNormal, mean, stddev, seed};
  }
};

// The optimizer the servers apply to the rows a push touched, its state kept
// beside the rows: SGD; row-wise Adagrad (one accumulator per row, of the
// mean squared gradient, as recommender systems use it); Adam, lazy (only
// the rows a push touched move, each with its own step count).
struct OptimizerOptions {
  enum class Kind { kSgd, kAdagrad, kAdam };
  Kind kind = Kind::kSgd;
  double lr = 0.01;
  double beta1 = 0.9;    // Adam
  double beta2 = 0.999;  // Adam
  double eps = 1e-8;     // Adagrad, Adam

  static OptimizerOptions Sgd(double lr) { return {Kind::kSgd, lr}; }
  static OptimizerOptions Adagrad(double lr, double eps = 1e-10) {
    return {Kind::kAdagrad, lr, 0.9, 0.999, eps};
  }
  static OptimizerOptions Adam(double lr, double beta1 = 0.9, double beta2 = 0.999,
                               double eps = 1e-8) {
    return {Kind::kAdam, lr, beta1, beta2, eps};
  }
};

// See Note [Parameter-server consistency], ps/shard.h.
struct Consistency {
  enum class Kind { kSynchronous, kBoundedStaleness, kAsynchronous };
  Kind kind = Kind::kAsynchronous;
  int64_t staleness = 0;  // τ, for kBoundedStaleness

  // Every trainer's push for clock c is aggregated and applied once; a pull
  // at clock c+1 sees it (PyTorch's batch-updating parameter server).
  static Consistency Synchronous() { return {Kind::kSynchronous, 0}; }
  // Pushes apply at once; a pull at clock c waits until the slowest trainer
  // reached c − τ (stale synchronous parallel).
  static Consistency Bounded(int64_t tau) { return {Kind::kBoundedStaleness, tau}; }
  // Pushes apply at once; pulls never wait (Hogwild).
  static Consistency Asynchronous() { return {Kind::kAsynchronous, 0}; }
};

struct TableOptions {
  std::string name;
  TableKind kind = TableKind::kSparse;
  int64_t rows = 0;  // dense only
  int64_t dim = 1;   // a row's width
  Initializer init;
  OptimizerOptions optimizer;
  Consistency consistency;

  static TableOptions Dense(std::string name, int64_t rows, int64_t dim) {
    TableOptions t;
    t.name = std::move(name);
    t.kind = TableKind::kDense;
    t.rows = rows;
    t.dim = dim;
    return t;
  }
  static TableOptions Sparse(std::string name, int64_t dim) {
    TableOptions t;
    t.name = std::move(name);
    t.kind = TableKind::kSparse;
    t.dim = dim;
    return t;
  }
  // "name: dense 1000 x 16" / "name: sparse x 64": what the shard map records.
  std::string Shape() const;
};

}  // namespace tessera::ps
