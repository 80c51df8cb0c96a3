#include "ddp/nccl/point_to_point.h"

#include <ATen/ops/tensor.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "ddp/nccl/nccl_communicator.h"
#include "ddp/nccl/nccl_ops.h"
#include "ddp/nccl/staging.h"

namespace tessera::ddp::nccl {
namespace {

// What precedes every message: tag, bytes, dtype.
constexpr int64_t kHeaderWords = 3;
constexpr size_t kHeaderBytes = kHeaderWords * sizeof(int64_t);

at::Tensor Header(const at::Tensor& tensor, uint64_t tag) {
  return at::tensor({static_cast<int64_t>(tag), static_cast<int64_t>(tensor.nbytes()),
                     static_cast<int64_t>(tensor.scalar_type())},
                    at::kLong);
}

std::string Describe(const at::Tensor& header) {
  const int64_t* words = header.data_ptr<int64_t>();
  return absl::StrCat("tag ", words[0], ", ", words[1], " bytes of ",
                      c10::toString(static_cast<c10::ScalarType>(words[2])));
}

}  // namespace

struct PointToPoint::Channel {
  std::unique_ptr<NcclCommunicator> comm;  // made by the first message
  ThreadPool worker;                       // last: joined first

  explicit Channel(const std::string& name) : worker(1, name) {}

  // The communicator, made at the first use; `key` names it in the store.
  absl::StatusOr<NcclCommunicator*> Communicator(store::StoreClient& store, const std::string& key,
                                                 bool sending, int device, absl::Time deadline) {
    if (comm == nullptr) {
      auto made = NcclCommunicator::Create(store, key, sending ? 0 : 1, 2, device, deadline);
      if (!made.ok()) return made.status();
      comm = *std::move(made);
    }
    TESSERA_RETURN_IF_ERROR(comm->Activate());
    return comm.get();
  }
};

PointToPoint::PointToPoint(store::StoreClient* store, std::string key_prefix, int rank, int size,
                           int device, absl::Duration timeout)
    : store_(store),
      key_prefix_(std::move(key_prefix)),
      rank_(rank),
      size_(size),
      device_(device),
      timeout_(timeout) {}

PointToPoint::~PointToPoint() = default;

// A message as one operation on the channel; both steps are waited for, so
// the scratch buffer is free again when it ends.
Work PointToPoint::Send(at::Tensor tensor, int dst, uint64_t tag) {
  return Post("send", tensor, dst, /*sending=*/true,
              [tensor, dst, tag](Channel& channel, absl::Time deadline) -> absl::Status {
                NcclCommunicator& comm = *channel.comm;
                const at::Tensor header = Header(tensor, tag);
                ncclDataType_t type = *NcclType(tensor.scalar_type());
                TESSERA_RETURN_IF_ERROR(
                    comm.scratch().Reserve(kHeaderBytes + StagingBytes({&tensor})).status());
                TESSERA_ASSIGN_OR_RETURN(char* head, StageIn(comm, header, 0, true));
                const std::string what = absl::StrCat("send to rank ", dst, " (tag ", tag, ")");
                TESSERA_RETURN_IF_ERROR(comm.Run(what, [&](ncclComm_t c, cudaStream_t s) {
                  return ncclSend(head, kHeaderWords, ncclInt64, 1, c, s);
                }, deadline));
                TESSERA_ASSIGN_OR_RETURN(char* data, StageIn(comm, tensor, kHeaderBytes, true));
                return comm.Run(what, [&](ncclComm_t c, cudaStream_t s) {
                  return ncclSend(data, tensor.numel(), type, 1, c, s);
                }, deadline);
              });
}

Work PointToPoint::Recv(at::Tensor tensor, int src, uint64_t tag) {
  return Post("recv", tensor, src, /*sending=*/false,
              [tensor, src, tag](Channel& channel, absl::Time deadline) -> absl::Status {
                NcclCommunicator& comm = *channel.comm;
                ncclDataType_t type = *NcclType(tensor.scalar_type());
                TESSERA_RETURN_IF_ERROR(
                    comm.scratch().Reserve(kHeaderBytes + StagingBytes({&tensor})).status());
                const at::Tensor expected = Header(tensor, tag);
                at::Tensor header = expected.clone();
                TESSERA_ASSIGN_OR_RETURN(char* head, StageIn(comm, header, 0, false));
                const std::string what = absl::StrCat("recv from rank ", src, " (tag ", tag, ")");
                TESSERA_RETURN_IF_ERROR(comm.Run(what, [&](ncclComm_t c, cudaStream_t s) {
                  return ncclRecv(head, kHeaderWords, ncclInt64, 0, c, s);
                }, deadline));
                TESSERA_RETURN_IF_ERROR(StageOut(comm, header, head));
                if (!header.equal(expected)) {
                  return comm.Break(absl::InvalidArgumentError(absl::StrCat(
                      what, " expected ", Describe(expected), ", but rank ", src, " sent ",
                      Describe(header), "; messages between two ranks match in order")));
                }
                TESSERA_ASSIGN_OR_RETURN(char* data, StageIn(comm, tensor, kHeaderBytes, false));
                TESSERA_RETURN_IF_ERROR(comm.Run(what, [&](ncclComm_t c, cudaStream_t s) {
                  return ncclRecv(data, tensor.numel(), type, 0, c, s);
                }, deadline));
                return StageOut(comm, tensor, data);
              });
}

Work PointToPoint::Post(const char* what, const at::Tensor& tensor, int peer, bool sending,
                        std::function<absl::Status(Channel&, absl::Time)> op) {
  if (auto status = CheckTensor(tensor, what, device_); !status.ok()) return Work::Ready(status);
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return Work::Ready(absl::InvalidArgumentError(absl::StrCat(what, ": bad peer ", peer)));
  }
  Channel* channel;
  {
    MutexLock lock(&mu_);
    auto& slot = channels_[{peer, sending}];
    if (slot == nullptr) slot = std::make_unique<Channel>(absl::StrCat("nccl-p2p-", peer));
    channel = slot.get();
  }
  const int src = sending ? rank_ : peer;
  const int dst = sending ? peer : rank_;
  const std::string key = absl::StrCat(key_prefix_, "/p2p/", src, "to", dst);
  return PostOperation(channel->worker, timeout_,
                       [this, channel, key, sending, op = std::move(op)](absl::Time deadline) {
                         auto comm = channel->Communicator(*store_, key, sending, device_, deadline);
                         if (!comm.ok()) return comm.status();
                         return op(*channel, deadline);
                       });
}

}  // namespace tessera::ddp::nccl
