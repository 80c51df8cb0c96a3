#include "collectives/nccl/point_to_point.h"

#include <ATen/ops/tensor.h>

#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_ops.h"
#include "collectives/nccl/staging.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace tessera::collectives::nccl {
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

// A message is two operations on the channel's communicator (the sender is
// its rank 0, the receiver rank 1), each waited for, so the scratch buffer is
// free again when the message is done.
absl::Status SendMessage(NcclCommunicator& comm, const at::Tensor& tensor, int dst, uint64_t tag,
                         absl::Time deadline) {
  const ncclDataType_t type = *NcclType(tensor.scalar_type());
  TESSERA_RETURN_IF_ERROR(comm.scratch().Reserve(kHeaderBytes + StagingBytes({&tensor})).status());
  const std::string what = absl::StrCat("send to rank ", dst, " (tag ", tag, ")");
  const at::Tensor header = Header(tensor, tag);
  TESSERA_ASSIGN_OR_RETURN(char* head, StageIn(comm, header, 0, true));
  TESSERA_RETURN_IF_ERROR(comm.Run(
      what,
      [&](ncclComm_t c, cudaStream_t s) {
        return ncclSend(head, kHeaderWords, ncclInt64, 1, c, s);
      },
      deadline));
  TESSERA_ASSIGN_OR_RETURN(char* data, StageIn(comm, tensor, kHeaderBytes, true));
  return comm.Run(
      what,
      [&](ncclComm_t c, cudaStream_t s) { return ncclSend(data, tensor.numel(), type, 1, c, s); },
      deadline);
}

// Receives the header first and checks it against this receive; on a
// mismatch the payload that follows cannot be matched safely any more, so
// the direction is closed.
absl::Status ReceiveMessage(NcclCommunicator& comm, const at::Tensor& tensor, int src, uint64_t tag,
                            absl::Time deadline) {
  const ncclDataType_t type = *NcclType(tensor.scalar_type());
  TESSERA_RETURN_IF_ERROR(comm.scratch().Reserve(kHeaderBytes + StagingBytes({&tensor})).status());
  const std::string what = absl::StrCat("recv from rank ", src, " (tag ", tag, ")");
  const at::Tensor expected = Header(tensor, tag);
  const at::Tensor header = expected.clone();
  TESSERA_ASSIGN_OR_RETURN(char* head, StageIn(comm, header, 0, false));
  TESSERA_RETURN_IF_ERROR(comm.Run(
      what,
      [&](ncclComm_t c, cudaStream_t s) {
        return ncclRecv(head, kHeaderWords, ncclInt64, 0, c, s);
      },
      deadline));
  TESSERA_RETURN_IF_ERROR(StageOut(comm, header, head));
  if (!header.equal(expected)) {
    return comm.Break(absl::InvalidArgumentError(
        absl::StrCat(what, " expected ", Describe(expected), ", but rank ", src, " sent ",
                     Describe(header), "; messages between two ranks match in order")));
  }
  TESSERA_ASSIGN_OR_RETURN(char* data, StageIn(comm, tensor, kHeaderBytes, false));
  TESSERA_RETURN_IF_ERROR(comm.Run(
      what,
      [&](ncclComm_t c, cudaStream_t s) { return ncclRecv(data, tensor.numel(), type, 0, c, s); },
      deadline));
  return StageOut(comm, tensor, data);
}

}  // namespace

struct PointToPoint::Channel {
  std::unique_ptr<NcclCommunicator> comm;  // made by the first message
  // Why making it failed: the direction is not tried again, since the
  // ranks could then meet different unique ids under the same key.
  absl::Status failed;
  ThreadPool worker;  // last: joined first

  explicit Channel(const std::string& name) : worker(1, name) {}

  // The communicator, made at the first use; `key` names it in the store.
  absl::StatusOr<NcclCommunicator*> Communicator(store::StoreClient& store, const std::string& key,
                                                 bool sending, int device, absl::Time deadline) {
    if (!failed.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("this direction failed to connect before: ", failed.message()));
    }
    if (comm == nullptr) {
      auto made = NcclCommunicator::Create(store, key, sending ? 0 : 1, 2, device, deadline);
      if (!made.ok()) {
        failed = made.status();
        return failed;
      }
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

Work PointToPoint::Send(at::Tensor tensor, int dst, uint64_t tag) {
  return Post("send", tensor, dst, /*sending=*/true,
              [tensor, dst, tag](NcclCommunicator& comm, absl::Time deadline) {
                return SendMessage(comm, tensor, dst, tag, deadline);
              });
}

Work PointToPoint::Recv(at::Tensor tensor, int src, uint64_t tag) {
  return Post("recv", tensor, src, /*sending=*/false,
              [tensor, src, tag](NcclCommunicator& comm, absl::Time deadline) {
                return ReceiveMessage(comm, tensor, src, tag, deadline);
              });
}

Work PointToPoint::Post(const char* what, const at::Tensor& tensor, int peer, bool sending,
                        std::function<absl::Status(NcclCommunicator&, absl::Time)> op) {
  // The tensor and the peer were checked by ProcessGroup::Send or Recv.
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
                         auto comm =
                             channel->Communicator(*store_, key, sending, device_, deadline);
                         if (!comm.ok()) return comm.status();
                         return op(**comm, deadline);
                       });
}

}  // namespace tessera::collectives::nccl
