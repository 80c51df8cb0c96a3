// WriteQueue: the frames a gRPC reactor still has to write, one at a time.
//
// gRPC's callback streams allow a single outstanding write; frames that
// arrive meanwhile wait here. The queue only decides what to write next —
// the caller starts the write, outside the queue's lock, on the buffer the
// queue returns (which stays valid until the next Done()). It counts the
// bytes it holds, the write in flight included, for the bound on unsent
// bytes (see Note [Bounded queues], rpc/queue_limits.h).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <deque>

#include "common/mutex.h"

namespace tessera::rpc {

class WriteQueue {
 public:
  // Queues `frame`; returns it if the caller must start writing it now.
  grpc::ByteBuffer* Push(grpc::ByteBuffer frame) {
    MutexLock lock(&mu_);
    bytes_ += frame.Length();
    frames_.push_back(std::move(frame));
    if (writing_) return nullptr;
    writing_ = true;
    return &frames_.front();
  }

  // The write in flight finished; returns the next frame to write, if any.
  grpc::ByteBuffer* Done() {
    MutexLock lock(&mu_);
    bytes_ -= frames_.front().Length();
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
    while (frames_.size() > (writing_ ? 1 : 0)) {
      bytes_ -= frames_.back().Length();
      frames_.pop_back();
    }
    return writing_;
  }

  uint64_t bytes() const {
    MutexLock lock(&mu_);
    return bytes_;
  }

  bool idle() const {
    MutexLock lock(&mu_);
    return !writing_;
  }

 private:
  mutable Mutex mu_;
  std::deque<grpc::ByteBuffer> frames_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::rpc
