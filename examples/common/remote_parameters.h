// Checkpointing parameters that live on other workers (a pipeline's stages,
// a parameter server's table): the writer fetches them by RRef; on resume
// it loads the saved values into them on their owners.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "dist_optim/distributed_optimizer.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"
#include "rref/rref.h"
#include "tessera/worker.h"

namespace tessera::examples {

// Lets peers load values into parameters this worker owns (LoadParameters).
// Every worker that may own such parameters registers it.
void RegisterParameterLoading(Worker& worker);

// The current values of `params`, as "<prefix><i>".
std::map<std::string, at::Tensor> FetchParameters(const std::vector<rref::RRef<at::Tensor>>& params,
                                                  const std::string& prefix);

// Copies "<prefix><i>" of `tensors` into `params` on their owners. Throws
// StatusError if one is missing or of another shape.
void LoadParameters(Worker& worker, const std::vector<rref::RRef<at::Tensor>>& params,
                    const std::map<std::string, at::Tensor>& tensors, const std::string& prefix);

// A DistributedOptimizer's state (its LocalOptimizers' on the parameters'
// owners) as "<prefix><i>"; and back, if `tensors` has it (returns whether
// it had).
std::map<std::string, at::Tensor> FetchOptimizerState(
    const dist_optim::DistributedOptimizer& optimizer, const std::string& prefix);
bool LoadOptimizerState(const dist_optim::DistributedOptimizer& optimizer,
                        const std::map<std::string, at::Tensor>& tensors,
                        const std::string& prefix);

// A driver whose model lives on other workers (a pipeline's stages) resumes:
// the last checkpoint's parameters ("stage.<i>") and optimizer state
// ("optimizer.<i>") are loaded into them, and the hooks returned start
// TrainEpochs at its position and save both every --checkpoint_every steps.
// Prints "[who] resuming ..." as Resume::Start does. `resume`, `params` and
// `optimizer` must outlive the hooks.
EpochHooks ResumeRemoteModel(Worker& worker, Resume& resume,
                             const std::vector<rref::RRef<at::Tensor>>& params,
                             const dist_optim::DistributedOptimizer& optimizer,
                             const std::string& who);

}  // namespace tessera::examples
