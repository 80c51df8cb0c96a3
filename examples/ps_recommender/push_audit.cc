#include "examples/ps_recommender/push_audit.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>

#include <cstdio>

#include "absl/time/time.h"

namespace tessera::examples {

namespace {
constexpr char kTable[] = "touches";
}  // namespace

ps::TableOptions PushAudit::Table() {
  ps::TableOptions table = ps::TableOptions::Sparse(kTable, 1);  // rows start at 0
  table.optimizer = ps::OptimizerOptions::Sgd(-1);               // row += gradient
  // Each push applied as it comes, not averaged with the others' (as a
  // synchronous table's are): every push counts 1.
  table.consistency = ps::Consistency::Asynchronous();
  return table;
}

ps::TableKeys PushAudit::Count(const std::vector<at::Tensor>& unique) {
  std::vector<at::Tensor> keys;
  for (size_t f = 0; f < unique.size(); ++f) {
    keys.push_back(unique[f] + static_cast<int64_t>(f) * vocabulary_);
  }
  at::Tensor all = at::cat(keys);
  touches_ += all.numel();
  key_sum_ += all.sum().item<int64_t>();
  return {kTable, all, at::ones({all.numel(), 1})};
}

void PushAudit::PrintPushed(const std::string& who) const {
  std::printf("[%s] audit: pushed %lld touches (key sum %lld)\n", who.c_str(),
              static_cast<long long>(touches_), static_cast<long long>(key_sum_));
}

void PushAudit::PrintCounted(const std::string& who, ModelTables& tables) const {
  const at::Tensor keys = at::arange(fields_ * vocabulary_, at::kLong);
  const at::Tensor rows = tables.Pull({{kTable, keys, {}}}).Get(absl::Minutes(5))[0];
  const at::Tensor counts = rows.select(1, 0).round().to(at::kLong);
  std::printf("[%s] audit: the servers counted %lld touches (key sum %lld)\n", who.c_str(),
              static_cast<long long>(counts.sum().item<int64_t>()),
              static_cast<long long>((counts * keys).sum().item<int64_t>()));
}

}  // namespace tessera::examples
