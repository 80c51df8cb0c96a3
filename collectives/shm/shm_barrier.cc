#include "collectives/shm/shm_barrier.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"

namespace tessera::collectives {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

bool Reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ShmBarrier::ShmBarrier(const ShmSegment* segment, Block* blocks, int local_rank,
                       std::vector<int> global_ranks)
    : segment_(segment),
      blocks_(blocks),
      local_rank_(local_rank),
      global_ranks_(std::move(global_ranks)) {}

void ShmBarrier::MarkAttached() { blocks_[local_rank_].pid.store(::getpid()); }

void ShmBarrier::MarkFailedToAttach() { blocks_[local_rank_].pid.store(kFailedToAttach); }

void ShmBarrier::Break() {
  Block& mine = blocks_[local_rank_];
  mine.broken.store(1, std::memory_order_seq_cst);
  Futex(&mine.phase, FUTEX_WAKE, INT_MAX, nullptr);
}

absl::Status ShmBarrier::Arrive(const char* call, absl::Time deadline, absl::Duration timeout) {
  ++phase_;
  Block& mine = blocks_[local_rank_];
  mine.phase.store(phase_, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) > 0) {
    Futex(&mine.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }
  for (int peer = 0; peer < static_cast<int>(global_ranks_.size()); ++peer) {
    if (peer == local_rank_) continue;
    if (auto status = WaitForPhase(peer, phase_, call, deadline, timeout); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status ShmBarrier::WaitForPhase(int peer, uint32_t phase, const char* call,
                                      absl::Time deadline, absl::Duration timeout) {
  std::atomic<uint32_t>& counter = blocks_[peer].phase;
  if (Reached(counter.load(std::memory_order_acquire), phase)) return absl::OkStatus();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // Spin, then yield: a small collective's peers are microseconds behind.
  for (int i = 0;; ++i) {
    if (Reached(counter.load(std::memory_order_acquire), phase)) return absl::OkStatus();
    if ((i & 63) != 0) {
      CpuRelax();
      continue;
    }
    const auto waited = Clock::now() - start;
    if (waited > std::chrono::microseconds(200)) break;
    if (waited > std::chrono::microseconds(20)) ::sched_yield();
  }
  std::atomic<uint32_t>& sleepers = blocks_[peer].sleepers;
  while (true) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = counter.load(std::memory_order_seq_cst);
    if (!Reached(seen, phase)) {
      const timespec slice{0, 20 * 1000 * 1000};
      Futex(&counter, FUTEX_WAIT, seen, &slice);
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (Reached(counter.load(std::memory_order_acquire), phase)) return absl::OkStatus();
    if (blocks_[peer].broken.load() != 0) {
      return absl::UnavailableError(
          absl::StrCat(call, " through shared memory: ", Describe(peer),
                       " failed (its own error says why) and left the collective"));
    }
    const int32_t pid = blocks_[peer].pid.load();
    if (pid == kFailedToAttach) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, ": ", Describe(peer), " could not use shared memory ", segment_->name()));
    }
    // A pid of 0: not attached yet (set-up), which is lateness, not death.
    if (pid != 0 && !segment_->IsAlive(peer)) {
      return absl::UnavailableError(absl::StrCat(call, " through shared memory: ", Describe(peer),
                                                 " exited or was killed (its liveness lock on ",
                                                 segment_->name(), " is gone)"));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          call, " through shared memory did not complete within ", absl::FormatDuration(timeout),
          ": ", Describe(peer), " did not arrive (", kCollectiveTimeoutCauses, ")"));
    }
  }
}

std::string ShmBarrier::Describe(int local_rank) const {
  return absl::StrCat("rank ", global_ranks_[local_rank], " (local rank ", local_rank, ", pid ",
                      blocks_[local_rank].pid.load(), ")");
}

}  // namespace tessera::collectives
