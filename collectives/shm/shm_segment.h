// A shared-memory segment of one host's ranks, and who of them is alive.
//
// Note [Shared-memory names] (a segment's lifetime): the segment is made under
// /dev/shm with a job-specific, unguessable name, mode 0600 (another user's
// process cannot open it), and its name is removed as soon as every local
// rank has mapped it (by the last one to attach) or the set-up fails. From
// then on only the mappings hold it, and the kernel frees it when the last
// rank exits, however it exits: a SIGKILLed job leaves nothing under
// /dev/shm. Names left by a creator killed within the set-up window (its pid
// is in the name) are removed by the next group made in the same pid
// namespace by the same user.
//
// Liveness: each rank holds a write lock on one byte of the segment's file
// (an open-file-description lock, released by the kernel when the process
// dies, whichever thread took it and in whatever pid namespace); another
// rank tests that byte to tell a slow rank from a dead one.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::collectives {

class ShmSegment {
 public:
  // Makes a new segment of `bytes` (reserved at once, so a full /dev/shm
  // is an error here rather than a SIGBUS later). `tag` is part of the name.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& tag, size_t bytes);
  // Maps the segment made by Create under `name`.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);
  ~ShmSegment();

  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The name under /dev/shm, with its leading '/'.
  const std::string& name() const { return name_; }

  // Removes the name (the memory stays while mapped). Idempotent; a name
  // already removed by another rank is not an error.
  void Unlink();

  // Marks local rank `slot` alive for as long as this process lives.
  absl::Status HoldLiveness(int slot);
  // Whether some process holds `slot`'s liveness lock.
  bool IsAlive(int slot) const;

 private:
  ShmSegment(std::string name, int fd, void* data, size_t bytes)
      : name_(std::move(name)), fd_(fd), data_(data), bytes_(bytes) {}

  const std::string name_;
  const int fd_;
  void* const data_;
  const size_t bytes_;
};

// Removes /dev/shm names of this user's segments whose creator (same pid
// namespace) no longer runs. Returns how many it removed.
int RemoveAbandonedSegments();

}  // namespace tessera::collectives
