#include "pipeline/pipeline_driver.h"

#include <ATen/ops/cat.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/status.h"
#include "rref/remote.h"

namespace tessera::pipeline {

PipelineDriver::PipelineDriver(rref::RRefContext& rrefs, std::vector<rref::RRef<Stage>> stages,
                               PipelineOptions options)
    : rrefs_(rrefs), stages_(std::move(stages)), options_(options) {
  if (stages_.empty() || options_.micro_batches < 1) {
    throw StatusError(
        absl::InvalidArgumentError("PipelineDriver needs at least one stage and one micro-batch"));
  }
}

at::Tensor PipelineDriver::Forward(const at::Tensor& batch) {
  std::vector<Future<at::Tensor>> outputs;
  for (const at::Tensor& micro : batch.chunk(options_.micro_batches)) {
    rref::RRef<at::Tensor> input = rref::MakeRRef(rrefs_, micro);
    for (size_t k = 0; k + 1 < stages_.size(); ++k) {
      input = stages_[k].Remote<at::Tensor>("forward", input);
    }
    outputs.push_back(stages_.back().RpcAsync<at::Tensor>(options_.timeout, "forward", input));
  }
  // Every call is sent: none is due later than this.
  const absl::Time deadline = absl::Now() + rrefs_.EffectiveTimeout(options_.timeout);
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < outputs.size(); ++i) {
    // The cause names the stage's worker that failed (errors nest per hop).
    auto part = AwaitCall(outputs[i], deadline);
    if (!part.ok()) {
      throw StatusError(Annotate(part.status(), absl::StrCat("pipeline forward of micro-batch ", i,
                                                             " of ", outputs.size())));
    }
    parts.push_back(*std::move(part));
  }
  return at::cat(parts);
}

StepResult PipelineDriver::Train(const at::Tensor& batch, const at::Tensor& target,
                                 const MicroBatchLoss& loss) {
  return RunScheduledStep(rrefs_, stages_, options_.schedule, options_.micro_batches,
                          options_.timeout, batch, target, loss);
}

std::vector<int64_t> PipelineDriver::PeakActivations() const {
  std::vector<int64_t> peaks;
  for (const auto& stage : stages_) {
    peaks.push_back(stage.RpcSync<std::vector<int64_t>>("activations", true).at(1));
  }
  return peaks;
}

std::vector<rref::RRef<at::Tensor>> PipelineDriver::ParameterRRefs() const {
  std::vector<rref::RRef<at::Tensor>> all;
  for (const auto& stage : stages_) {
    auto mine = stage.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs");
    all.insert(all.end(), mine.begin(), mine.end());
  }
  return all;
}

}  // namespace tessera::pipeline
