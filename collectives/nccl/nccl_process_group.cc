#include "collectives/nccl/nccl_process_group.h"

#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_ops.h"
#include "collectives/nccl/nccl_status.h"
#include "collectives/nccl/point_to_point.h"
#include "collectives/nccl/staging.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "common/timeouts.h"

namespace tessera::collectives {
namespace {

using nccl::NcclCommunicator;
using nccl::NcclType;
using nccl::StageIn;
using nccl::StageOut;
using nccl::StagingBytes;

std::string Describe(const char* op, const at::Tensor& tensor) {
  return absl::StrCat(op, " of ", tensor.numel(), " ", c10::toString(tensor.scalar_type()));
}

// Collectives run one at a time, in issue order, on one thread: each is
// staged in, enqueued, waited for (with the deadline) and staged out before
// the next starts.
class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::unique_ptr<NcclCommunicator> comm, store::StoreClient* store,
                   const NcclOptions& options)
      : ProcessGroup("NCCL"),
        comm_(std::move(comm)),
        timeout_(options.timeout),
        p2p_(store, options.store_prefix, comm_->rank(), comm_->size(), comm_->device(),
             options.timeout) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

 protected:
  // Its device's tensors, or CPU tensors, staged.
  absl::Status CheckTensor(const char* op, const at::Tensor& tensor) const override {
    return nccl::CheckTensor(tensor, op, comm_->device());
  }

  Work DoAllreduce(at::Tensor tensor, ReduceOp op) override {
    return InPlace("allreduce", tensor, /*copy_in=*/true,
                   [tensor, op](char* data, ncclComm_t comm, cudaStream_t stream) {
                     return ncclAllReduce(data, data, tensor.numel(),
                                          *NcclType(tensor.scalar_type()), nccl::NcclReduceOp(op),
                                          comm, stream);
                   });
  }

  Work DoBroadcast(at::Tensor tensor, int root) override {
    return InPlace("broadcast", tensor, /*copy_in=*/rank() == root,
                   [tensor, root](char* data, ncclComm_t comm, cudaStream_t stream) {
                     return ncclBroadcast(data, data, tensor.numel(),
                                          *NcclType(tensor.scalar_type()), root, comm, stream);
                   });
  }

  // An allreduce of one int, as PyTorch's NCCL barrier.
  Work DoBarrier() override {
    return Collective([this](absl::Time deadline) -> absl::Status {
      TESSERA_ASSIGN_OR_RETURN(char* word, comm_->scratch().Reserve(sizeof(int32_t)));
      return comm_->Run(
          "barrier",
          [word](ncclComm_t comm, cudaStream_t stream) {
            return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, comm, stream);
          },
          deadline);
    });
  }

  // In place on the device: this rank's input is staged at its place in the
  // output.
  Work DoAllgather(at::Tensor input, at::Tensor output) override {
    return Collective([this, input, output](absl::Time deadline) -> absl::Status {
      TESSERA_RETURN_IF_ERROR(comm_->scratch().Reserve(StagingBytes({&output})).status());
      TESSERA_ASSIGN_OR_RETURN(char* whole, StageIn(*comm_, output, 0, false));
      TESSERA_ASSIGN_OR_RETURN(char* mine, StageIn(*comm_, input, rank() * input.nbytes(), true));
      TESSERA_RETURN_IF_ERROR(comm_->Run(
          Describe("allgather", input),
          [&](ncclComm_t comm, cudaStream_t stream) {
            return ncclAllGather(mine, whole, input.numel(), *NcclType(input.scalar_type()), comm,
                                 stream);
          },
          deadline));
      return StageOut(*comm_, output, whole);
    });
  }

  // In place on the device (the result chunk is this rank's part of the
  // staged input); a CPU `input` is left as it was.
  Work DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    return Collective([this, input, output, op](absl::Time deadline) -> absl::Status {
      TESSERA_RETURN_IF_ERROR(comm_->scratch().Reserve(StagingBytes({&input})).status());
      TESSERA_ASSIGN_OR_RETURN(char* whole, StageIn(*comm_, input, 0, true));
      TESSERA_ASSIGN_OR_RETURN(char* mine,
                               StageIn(*comm_, output, rank() * output.nbytes(), false));
      TESSERA_RETURN_IF_ERROR(comm_->Run(
          Describe("reduce_scatter", output),
          [&](ncclComm_t comm, cudaStream_t stream) {
            return ncclReduceScatter(whole, mine, output.numel(), *NcclType(output.scalar_type()),
                                     nccl::NcclReduceOp(op), comm, stream);
          },
          deadline));
      return StageOut(*comm_, output, mine);
    });
  }

  Work DoSend(at::Tensor tensor, int dst, uint64_t tag) override {
    return p2p_.Send(std::move(tensor), dst, tag);
  }
  Work DoRecv(at::Tensor tensor, int src, uint64_t tag) override {
    return p2p_.Recv(std::move(tensor), src, tag);
  }

 private:
  using InPlaceCall = std::function<ncclResult_t(char*, ncclComm_t, cudaStream_t)>;

  // An operation on one tensor, updated in place.
  Work InPlace(const char* what, const at::Tensor& tensor, bool copy_in, InPlaceCall call) {
    return Collective(
        [this, what, tensor, copy_in, call = std::move(call)](absl::Time deadline) -> absl::Status {
          TESSERA_RETURN_IF_ERROR(comm_->scratch().Reserve(StagingBytes({&tensor})).status());
          TESSERA_ASSIGN_OR_RETURN(char* data, StageIn(*comm_, tensor, 0, copy_in));
          TESSERA_RETURN_IF_ERROR(comm_->Run(
              Describe(what, tensor),
              [&](ncclComm_t comm, cudaStream_t stream) { return call(data, comm, stream); },
              deadline));
          return StageOut(*comm_, tensor, data);
        });
  }

  // Every operation first makes the device current on the worker thread
  // (staging allocates and copies before NCCL is called).
  Work Collective(std::function<absl::Status(absl::Time)> op) {
    return nccl::PostOperation(worker_, timeout_,
                               [this, op = std::move(op)](absl::Time deadline) -> absl::Status {
                                 TESSERA_RETURN_IF_ERROR(comm_->Activate());
                                 return op(deadline);
                               });
  }

  const std::unique_ptr<NcclCommunicator> comm_;
  const absl::Duration timeout_;
  nccl::PointToPoint p2p_;
  ThreadPool worker_{1, "nccl"};  // last: joined first, while the communicator lives
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> Connect(store::StoreClient* store, int rank, int size,
                                                      NcclOptions options) {
  options = WithDefaultTimeout(std::move(options));
  if (size <= 0 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("invalid rank ", rank, " of ", size));
  }
  int devices = 0;
  if (cudaError_t error = cudaGetDeviceCount(&devices); error != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the NCCL backend needs a GPU, and none is visible (",
                     error == cudaSuccess ? "no devices" : cudaGetErrorString(error), ")"));
  }
  const int device = options.device >= 0 ? options.device : rank % devices;
  if (device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " asked for, but ", devices, " are visible"));
  }
  auto comm = NcclCommunicator::Create(*store, options.store_prefix + "/unique_id", rank, size,
                                       device, absl::Now() + options.connect_timeout);
  if (!comm.ok()) {
    return tessera::Annotate(comm.status(),
                             absl::StrCat("NCCL process group of rank ", rank, " of ", size));
  }
  return std::unique_ptr<ProcessGroup>(new NcclProcessGroup(*std::move(comm), store, options));
}

}  // namespace

int VisibleCudaDevices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::unique_ptr<ProcessGroup> CreateNcclProcessGroup(store::StoreClient* store, int rank, int size,
                                                     const NcclOptions& options) {
  return WithTracing(ValueOrThrow(Connect(store, rank, size, options)));
}

EnvProcessGroup CreateNcclProcessGroupFromEnv(const NcclOptions& options) {
  return ValueOrThrow(CreateProcessGroupFromEnv(
      [&](store::StoreClient* store, const store::RendezvousEnv& env) {
        NcclOptions local = options;
        if (local.device < 0) {
          const int devices = VisibleCudaDevices();
          local.device = devices > 0 ? env.local_rank % devices : 0;
        }
        return Connect(store, env.rank, env.world_size, local);
      },
      OrDefault(options.timeout, DefaultTimeout())));
}

}  // namespace tessera::collectives
