#include "examples/common/remote_parameters.h"

#include <torch/csrc/autograd/grad_mode.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::examples {
namespace {

constexpr char kLoadParameter[] = "examples.load_parameter";

}  // namespace

void RegisterParameterLoading(Worker& worker) {
  worker.Register(kLoadParameter, [](rref::RRef<at::Tensor> param, at::Tensor value) {
    at::Tensor target = param.local_value();
    if (!target.sizes().equals(value.sizes())) {
      return absl::InvalidArgumentError("a saved parameter of another shape");
    }
    torch::autograd::AutoGradMode no_grad(false);
    target.copy_(value);
    return absl::OkStatus();
  });
}

std::map<std::string, at::Tensor> FetchParameters(const std::vector<rref::RRef<at::Tensor>>& params,
                                                  const std::string& prefix) {
  std::map<std::string, at::Tensor> tensors;
  for (size_t i = 0; i < params.size(); ++i) {
    tensors[absl::StrCat(prefix, i)] = params[i].to_here().detach().clone();
  }
  return tensors;
}

void LoadParameters(Worker& worker, const std::vector<rref::RRef<at::Tensor>>& params,
                    const std::map<std::string, at::Tensor>& tensors, const std::string& prefix) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = tensors.find(absl::StrCat(prefix, i));
    if (it == tensors.end()) {
      throw StatusError(absl::DataLossError(absl::StrCat("the checkpoint has no ", prefix, i)));
    }
    worker.RpcSync<void>(params[i].owner_name(), kLoadParameter, params[i], it->second);
  }
}

std::map<std::string, at::Tensor> FetchOptimizerState(
    const dist_optim::DistributedOptimizer& optimizer, const std::string& prefix) {
  std::map<std::string, at::Tensor> tensors;
  const std::vector<at::Tensor> states = optimizer.SaveState();
  for (size_t i = 0; i < states.size(); ++i) tensors[absl::StrCat(prefix, i)] = states[i];
  return tensors;
}

bool LoadOptimizerState(const dist_optim::DistributedOptimizer& optimizer,
                        const std::map<std::string, at::Tensor>& tensors,
                        const std::string& prefix) {
  std::vector<at::Tensor> states;
  for (size_t i = 0; i < optimizer.num_owners(); ++i) {
    auto it = tensors.find(absl::StrCat(prefix, i));
    if (it == tensors.end()) return false;
    states.push_back(it->second);
  }
  optimizer.LoadState(states);
  return true;
}

EpochHooks ResumeRemoteModel(Worker& worker, Resume& resume,
                             const std::vector<rref::RRef<at::Tensor>>& params,
                             const dist_optim::DistributedOptimizer& optimizer,
                             const std::string& who) {
  if (resume.last().has_value()) {
    LoadParameters(worker, params, resume.last()->tensors, "stage.");
    LoadOptimizerState(optimizer, resume.last()->tensors, "optimizer.");
  }
  const checkpoint::TrainingPosition start = resume.Start(who);
  return {start.epoch, start.step,
          [&resume, &params, &optimizer, who](int64_t epoch, int64_t step, int64_t steps_done) {
            if (!resume.Due(steps_done)) return;
            auto tensors = FetchParameters(params, "stage.");
            tensors.merge(FetchOptimizerState(optimizer, "optimizer."));
            resume.Save(who, std::move(tensors), {epoch, step, 0, {}});
          }};
}

}  // namespace tessera::examples
