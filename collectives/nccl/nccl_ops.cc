#include "collectives/nccl/nccl_ops.h"

#include "absl/strings/str_cat.h"

namespace tessera::collectives::nccl {

absl::StatusOr<ncclDataType_t> NcclType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return ncclFloat32;
    case c10::ScalarType::Double:
      return ncclFloat64;
    case c10::ScalarType::Half:
      return ncclFloat16;
    case c10::ScalarType::BFloat16:
      return ncclBfloat16;
    case c10::ScalarType::Char:
      return ncclInt8;
    case c10::ScalarType::Byte:
      return ncclUint8;
    case c10::ScalarType::Int:
      return ncclInt32;
    case c10::ScalarType::Long:
      return ncclInt64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("the NCCL backend does not take ", c10::toString(type), " tensors"));
  }
}

ncclRedOp_t NcclReduceOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

absl::Status CheckTensor(const at::Tensor& tensor, const char* what, int device) {
  if (!tensor.defined() || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the NCCL backend takes defined, contiguous tensors"));
  }
  const c10::Device where = tensor.device();
  if (!where.is_cpu() && !(where.is_cuda() && where.index() == device)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a tensor on ", where.str(),
                                                   "; this rank's NCCL group uses cuda:", device,
                                                   " (or CPU tensors, staged)"));
  }
  return NcclType(tensor.scalar_type()).status();
}

Work PostOperation(ThreadPool& worker, absl::Duration timeout,
                   std::function<absl::Status(absl::Time deadline)> op) {
  Promise<std::monostate> done;
  worker.Post([done, timeout, op = std::move(op)]() {
    absl::Status status;
    try {
      status = op(absl::Now() + timeout);
    } catch (const std::exception& e) {  // LibTorch calls may throw
      status = absl::InternalError(e.what());
    }
    CompleteWork(done, status);
  });
  return done.GetFuture();
}

}  // namespace tessera::collectives::nccl
