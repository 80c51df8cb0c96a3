// WriteQueue: the frames a gRPC reactor still has to write, one at a time.
//
// gRPC's callback streams allow a single outstanding write; frames that
// arrive meanwhile wait here. The queue only decides what to write next —
// the caller starts the write, outside the queue's lock, on the buffer the
// queue returns (which stays valid until the next Done()).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <deque>

#include "common/mutex.h"

namespace tessera::rpc {

class WriteQueue {
 public:
  // Queues `frame`; returns it if the caller must start writing it now.
  grpc::ByteBuffer* Push(grpc::ByteBuffer frame) {
    MutexLock lock(&mu_);
    frames_.push_back(std::move(frame));
    if (writing_) return nullptr;
    writing_ = true;
    return &frames_.front();
  }

  // The write in flight finished; returns the next frame to write, if any.
  grpc::ByteBuffer* Done() {
    MutexLock lock(&mu_);
    frames_.pop_front();
    if (frames_.empty()) {
      writing_ = false;
      return nullptr;
    }
    return &frames_.front();
  }

  // Drops the frames not yet started; true if a write is still in flight.
  bool DropQueued() {
    MutexLock lock(&mu_);
    if (writing_) {
      while (frames_.size() > 1) frames_.pop_back();
    } else {
      frames_.clear();
    }
    return writing_;
  }

  bool idle() const {
    MutexLock lock(&mu_);
    return !writing_;
  }

 private:
  mutable Mutex mu_;
  std::deque<grpc::ByteBuffer> frames_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera::rpc
