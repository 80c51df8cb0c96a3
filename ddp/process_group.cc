#include "ddp/process_group.h"

#include "absl/strings/str_cat.h"

namespace tessera::ddp {

absl::Status CheckCpuTensor(const char* op, const at::Tensor& tensor, const char* backend) {
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the ", backend, " backend takes defined, contiguous CPU tensors"));
  }
  return absl::OkStatus();
}

absl::Status CheckWholeAndChunk(const char* op, const at::Tensor& whole, const at::Tensor& chunk,
                                int ranks) {
  if (whole.numel() != chunk.numel() * ranks || whole.scalar_type() != chunk.scalar_type() ||
      whole.device() != chunk.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the whole tensor must hold ", ranks, " x ", chunk.numel(), " elements of ",
        c10::toString(chunk.scalar_type()), " on ", chunk.device().str()));
  }
  return absl::OkStatus();
}

void CompleteWork(const Promise<std::monostate>& done, const absl::Status& status) {
  if (status.ok()) {
    done.Set(std::monostate{});
  } else {
    done.Set(status);
  }
}

}  // namespace tessera::ddp
