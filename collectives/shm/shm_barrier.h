// ShmBarrier: the barrier every shared-memory collective is built on (see
// Note [Shared-memory collectives], collectives/shm/shm_communicator.cc):
// each local rank's phase counter in the segment, the waits on the others'
// (spin, yield, then a futex), and the failure of a wait named — a rank
// that died, one that broke, one that never came.
//
// Thread-compatible: one call at a time (the communicator's).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/shm/shm_segment.h"

namespace tessera::collectives {

class ShmBarrier {
 public:
  // One local rank's part of the segment (two cache lines: no false
  // sharing with the prefetcher).
  struct alignas(128) Block {
    std::atomic<uint32_t> phase;     // the phases it has reached
    std::atomic<uint32_t> sleepers;  // ranks asleep on `phase`
    std::atomic<int32_t> pid;        // 0 until attached; kFailedToAttach
    // Set when this rank's communicator broke: the others stop waiting.
    std::atomic<uint32_t> broken;
  };
  // A block's pid when its rank could not use the segment.
  static constexpr int32_t kFailedToAttach = -1;

  // `blocks[i]` is local rank i's, in `segment`; `global_ranks[i]` its rank
  // in the job (for messages).
  ShmBarrier(const ShmSegment* segment, Block* blocks, int local_rank,
             std::vector<int> global_ranks);

  // Marks this rank attached (its pid), or unable to attach: the others
  // then fail at once rather than at their deadline.
  void MarkAttached();
  void MarkFailedToAttach();

  // This rank is at its next phase; returns once every local rank is, or
  // the first failure: `call` names what waited, `deadline` bounds the wait
  // (`timeout` is what the deadline came from, for the message).
  absl::Status Arrive(const char* call, absl::Time deadline, absl::Duration timeout);
  // This rank leaves for good: the others waiting for it fail at once.
  void Break();

  // "rank 5 (local rank 1, pid 4242)".
  std::string Describe(int local_rank) const;

 private:
  absl::Status WaitForPhase(int peer, uint32_t phase, const char* call, absl::Time deadline,
                            absl::Duration timeout);

  const ShmSegment* const segment_;
  Block* const blocks_;
  const int local_rank_;
  const std::vector<int> global_ranks_;
  uint32_t phase_ = 0;  // phases passed
};

}  // namespace tessera::collectives
