#include "checkpoint/optimizer_state.h"

#include <ATen/ops/empty.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <sstream>

#include "absl/status/status.h"
#include "common/status.h"

namespace tessera::checkpoint {

at::Tensor SaveOptimizerState(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  return state;
}

void LoadOptimizerState(torch::optim::Optimizer& optimizer, const at::Tensor& state) {
  if (state.scalar_type() != at::kByte || state.dim() != 1) {
    throw StatusError(absl::DataLossError("optimizer state is not a byte tensor"));
  }
  const at::Tensor bytes = state.contiguous();
  std::istringstream in(
      std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer.load(archive);
  } catch (const std::exception& e) {
    throw StatusError(
        absl::DataLossError(std::string("cannot restore optimizer state: ") + e.what()));
  }
}

}  // namespace tessera::checkpoint
