// The optimizers a DistributedOptimizer can run on each parameter owner —
// LibTorch's own, with LibTorch's defaults.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace torch::optim {
class Optimizer;
}

namespace tessera::dist_optim {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};
struct RmsPropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};

using OptimizerOptions =
    std::variant<SgdOptions, AdamOptions, AdamWOptions, AdagradOptions, RmsPropOptions>;

// How options travel to the owners: a kind ("sgd", "adam", ...) and its
// named numeric options.
struct WireOptions {
  std::string kind;
  std::map<std::string, double> values;
};
WireOptions ToWire(const OptimizerOptions& options);

// On the owner: LibTorch's optimizer of that kind over `params`. Unknown
// kinds and option names, and values LibTorch rejects, are errors.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const WireOptions& options, const std::vector<at::Tensor>& params);

}  // namespace tessera::dist_optim
