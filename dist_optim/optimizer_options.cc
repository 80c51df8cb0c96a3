#include "dist_optim/optimizer_options.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <set>

#include "absl/strings/str_join.h"

namespace tessera::dist_optim {
namespace {

struct Encoder {
  WireOptions operator()(const SgdOptions& o) const {
    return {"sgd", {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
                    {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov ? 1.0 : 0.0}}};
  }
  WireOptions operator()(const AdamOptions& o) const {
    return {"adam", {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                     {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}}};
  }
  WireOptions operator()(const AdamWOptions& o) const {
    return {"adamw", {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                      {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}}};
  }
  WireOptions operator()(const AdagradOptions& o) const {
    return {"adagrad",
            {{"lr", o.lr}, {"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
             {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}}};
  }
  WireOptions operator()(const RmsPropOptions& o) const {
    return {"rmsprop", {{"lr", o.lr}, {"alpha", o.alpha}, {"eps", o.eps},
                        {"weight_decay", o.weight_decay}, {"momentum", o.momentum},
                        {"centered", o.centered ? 1.0 : 0.0}}};
  }
};

using Values = std::map<std::string, double>;
using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const std::vector<at::Tensor>&, const Values&)>;

struct Kind {
  std::set<std::string> names;  // the options it takes (all required)
  Factory make;
};

const std::map<std::string, Kind>& Kinds() {
  static const auto* kinds = new std::map<std::string, Kind>{
      {"sgd",
       {{"lr", "momentum", "dampening", "weight_decay", "nesterov"},
        [](const std::vector<at::Tensor>& p, const Values& v) {
          return std::make_unique<torch::optim::SGD>(
              p, torch::optim::SGDOptions(v.at("lr"))
                     .momentum(v.at("momentum"))
                     .dampening(v.at("dampening"))
                     .weight_decay(v.at("weight_decay"))
                     .nesterov(v.at("nesterov") != 0));
        }}},
      {"adam",
       {{"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"},
        [](const std::vector<at::Tensor>& p, const Values& v) {
          return std::make_unique<torch::optim::Adam>(
              p, torch::optim::AdamOptions(v.at("lr"))
                     .betas({v.at("beta1"), v.at("beta2")})
                     .eps(v.at("eps"))
                     .weight_decay(v.at("weight_decay"))
                     .amsgrad(v.at("amsgrad") != 0));
        }}},
      {"adamw",
       {{"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"},
        [](const std::vector<at::Tensor>& p, const Values& v) {
          return std::make_unique<torch::optim::AdamW>(
              p, torch::optim::AdamWOptions(v.at("lr"))
                     .betas({v.at("beta1"), v.at("beta2")})
                     .eps(v.at("eps"))
                     .weight_decay(v.at("weight_decay"))
                     .amsgrad(v.at("amsgrad") != 0));
        }}},
      {"adagrad",
       {{"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"},
        [](const std::vector<at::Tensor>& p, const Values& v) {
          return std::make_unique<torch::optim::Adagrad>(
              p, torch::optim::AdagradOptions(v.at("lr"))
                     .lr_decay(v.at("lr_decay"))
                     .weight_decay(v.at("weight_decay"))
                     .initial_accumulator_value(v.at("initial_accumulator_value"))
                     .eps(v.at("eps")));
        }}},
      {"rmsprop",
       {{"lr", "alpha", "eps", "weight_decay", "momentum", "centered"},
        [](const std::vector<at::Tensor>& p, const Values& v) {
          return std::make_unique<torch::optim::RMSprop>(
              p, torch::optim::RMSpropOptions(v.at("lr"))
                     .alpha(v.at("alpha"))
                     .eps(v.at("eps"))
                     .weight_decay(v.at("weight_decay"))
                     .momentum(v.at("momentum"))
                     .centered(v.at("centered") != 0));
        }}},
  };
  return *kinds;
}

}  // namespace

WireOptions ToWire(const OptimizerOptions& options) { return std::visit(Encoder{}, options); }

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const WireOptions& options, const std::vector<at::Tensor>& params) {
  auto kind = Kinds().find(options.kind);
  if (kind == Kinds().end()) {
    std::vector<std::string> known;
    for (const auto& [name, unused] : Kinds()) known.push_back(name);
    return absl::InvalidArgumentError("unknown optimizer '" + options.kind +
                                      "' (known: " + absl::StrJoin(known, ", ") + ")");
  }
  std::set<std::string> given;
  for (const auto& [name, value] : options.values) given.insert(name);
  if (given != kind->second.names) {
    return absl::InvalidArgumentError(
        "optimizer '" + options.kind + "' takes exactly the options {" +
        absl::StrJoin(kind->second.names, ", ") + "}, got {" + absl::StrJoin(given, ", ") + "}");
  }
  try {
    return kind->second.make(params, options.values);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError("optimizer '" + options.kind + "': " + e.what());
  }
}

}  // namespace tessera::dist_optim
