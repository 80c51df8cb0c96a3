// Tensors in shared memory: sent to a worker on the same host, only a
// handle travels, and the receiver's tensor is the same memory.
//
// Note [Tensors in shared memory]: an ordinary tensor is copied on its way
// to another process — once per direction on the same host (the cma
// channel), at best a memcpy's speed. A tensor made here lives in a sealed
// memfd segment instead; when it goes to a worker on the same host (same
// kernel and network namespace, the TensorPipe backend with its Unix-socket
// transport), the segment's descriptor is posted to the receiver's inbox
// (rpc/tensorpipe/fd_inbox.h) and the envelope carries a ticket for it in
// place of the bytes. The receiver maps the segment (pre-faulted) and its
// tensor views it. To any other worker the tensor's bytes travel as usual.
//
// The memory is then shared, as with PyTorch's share_memory_(): a write by
// either side is seen by the other, so hand over a tensor you will not
// write again, or agree on who writes when. The segment lives while any
// process holds a tensor on it (or its descriptor is in flight), and the
// kernel frees it when the last one goes, however they exit: there is no
// name to leak. Its size is sealed, so no process can shrink it under
// another's mapping.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"

namespace tessera::rpc {

// An uninitialised contiguous tensor whose storage is a new shared-memory
// segment. Throws StatusError: RESOURCE_EXHAUSTED when the segment cannot be
// made (a full /dev/shm), INVALID_ARGUMENT for a negative size.
at::Tensor EmptyInSharedMemory(at::IntArrayRef sizes, at::ScalarType dtype);

// `tensor` itself if it is already in shared memory and contiguous, else a
// contiguous copy of it there. Throws StatusError as EmptyInSharedMemory,
// and INVALID_ARGUMENT for a tensor that is not dense and on the CPU.
at::Tensor ToSharedMemory(const at::Tensor& tensor);

// Whether `tensor`'s storage is a shared-memory segment made by this file
// (here or in a peer that sent it).
bool IsInSharedMemory(const at::Tensor& tensor);

// --- for the transports ---

// One sealed memfd segment, mapped read-write in this process.
class SharedSegment {
 public:
  using Id = std::array<uint8_t, 16>;

  // A new segment of `bytes` (at least 1), with a random id.
  static absl::StatusOr<std::shared_ptr<SharedSegment>> Create(size_t bytes);
  // The segment behind `fd` (a descriptor received from a peer; taken over
  // and closed here on every path), after checking that it is one made by
  // Create with id `id` and size `bytes`, sealed against shrinking. A
  // segment already mapped in this process is shared, not mapped again.
  static absl::StatusOr<std::shared_ptr<SharedSegment>> Adopt(int fd, const Id& id, size_t bytes);

  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  int fd() const { return fd_; }
  char* data() const { return data_; }
  size_t size() const { return bytes_; }
  const Id& id() const { return id_; }

 private:
  SharedSegment(int fd, char* data, size_t bytes, const Id& id)
      : fd_(fd), data_(data), bytes_(bytes), id_(id) {}

  const int fd_;
  char* const data_;
  const size_t bytes_;
  const Id id_;
};

// Where a tensor's first element is in its segment.
struct SharedView {
  std::shared_ptr<SharedSegment> segment;
  uint64_t offset = 0;
};

// `tensor`'s segment, if its storage is one.
std::optional<SharedView> SharedViewOf(const at::Tensor& tensor);

// A contiguous tensor of `sizes` and `dtype` viewing `segment` from byte
// `offset`; InvalidArgument unless it fits and the offset is aligned to the
// element size.
absl::StatusOr<at::Tensor> TensorInSegment(std::shared_ptr<SharedSegment> segment, uint64_t offset,
                                           at::IntArrayRef sizes, at::ScalarType dtype);

}  // namespace tessera::rpc
