// Send and Recv of the NCCL process group.
//
// Each direction between this rank and a peer gets a two-rank communicator
// of its own (the sender is its rank 0), made by the first message that way,
// with its own stream and thread. A single communicator per pair would
// deadlock a ring: NCCL runs one communicator's operations in order, so two
// ranks that both send before they receive would each wait for the other's
// receive. (PyTorch makes one communicator per pair and leaves that case to
// batch_isend_irecv.)
//
// NCCL has no tags: messages of one direction match in order. A message is
// preceded by a small header (tag, bytes, dtype) that the receiver checks
// against its Recv, so a mismatch is an error naming both sides instead of
// silently wrong data or a hang; the direction is then closed for good.
// Internal to collectives/nccl. Thread-safety: thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "common/mutex.h"
#include "store/store_client.h"

namespace tessera::collectives::nccl {

class NcclCommunicator;

class PointToPoint {
 public:
  PointToPoint(store::StoreClient* store, std::string key_prefix, int rank, int size, int device,
               absl::Duration timeout);
  ~PointToPoint();

  Work Send(at::Tensor tensor, int dst, uint64_t tag);
  Work Recv(at::Tensor tensor, int src, uint64_t tag);

 private:
  struct Channel;
  // Runs `op` on the channel for (peer, sending), made at first use.
  Work Post(const char* what, const at::Tensor& tensor, int peer, bool sending,
            std::function<absl::Status(NcclCommunicator&, absl::Time)> op);

  store::StoreClient* const store_;
  const std::string key_prefix_;
  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  Mutex mu_;
  // (peer, sending) -> channel.
  std::map<std::pair<int, bool>, std::unique_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::collectives::nccl
