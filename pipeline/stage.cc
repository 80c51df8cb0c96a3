#include "pipeline/stage.h"

#include <stdexcept>

#include "absl/strings/str_join.h"
#include "dist_autograd/dist_autograd.h"
#include "rref/remote.h"

namespace tessera::pipeline {

Future<at::Tensor> Stage::Forward(rref::RRef<at::Tensor> input) {
  return input.to_here_async().Then(
      [forward = model_.forward](const absl::StatusOr<at::Tensor>& fetched)
          -> absl::StatusOr<at::Tensor> {
        if (!fetched.ok()) return fetched.status();
        return forward(*fetched);
      });
}

std::vector<rref::RRef<at::Tensor>> Stage::ParameterRRefs(rpc::CallContext& ctx) {
  return rref::MakeRRefs(ctx, model_.parameters);
}

std::vector<at::Tensor> Stage::Gradients(rpc::CallContext& ctx, int64_t context_id) {
  auto* autograd = &dist_autograd::DistAutograd::Of(*ctx.runtime);
  return autograd->GetGradients(context_id, model_.parameters);
}

std::vector<at::Tensor> Stage::ParameterValues() {
  std::vector<at::Tensor> result;
  for (const auto& parameter : model_.parameters) result.push_back(parameter.detach().clone());
  return result;
}

void RegisterStage(rref::ClassRegistry& classes, std::map<std::string, StageFactory> factories) {
  classes.Class<Stage>("tessera.pipeline.Stage")
      .Factory<std::string, int64_t>([factories = std::move(factories)](std::string name,
                                                                          int64_t seed) {
        auto it = factories.find(name);
        if (it == factories.end()) {
          std::vector<std::string> known;
          for (const auto& [known_name, factory] : factories) known.push_back(known_name);
          throw std::invalid_argument("no pipeline stage model named '" + name +
                                      "' on this worker (known: " +
                                      absl::StrJoin(known, ", ") + ")");
        }
        return std::make_shared<Stage>(it->second(seed));
      })
      .Method("forward", &Stage::Forward)
      .Method("parameter_rrefs", &Stage::ParameterRRefs)
      .Method("gradients", &Stage::Gradients)
      .Method("parameter_values", &Stage::ParameterValues);
}

}  // namespace tessera::pipeline
