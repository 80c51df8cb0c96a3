#include "ddp/shm/shm_communicator.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "ddp/shm/shm_reduce.h"

// Note [Shared-memory collectives]
//
// The segment holds a header, one control block per local rank (its phase
// counter, the description of its current call, its pid) and two data
// slots per local rank. A barrier is a phase: a rank stores its next phase
// in its own counter and waits for every other counter to reach it (spins
// ~20 µs, yields ~200 µs, then sleeps on the counter as a futex, which the
// rank that moves it wakes only when someone sleeps there). Waits wake every
// 20 ms to check the deadline and whether the awaited rank is alive
// (ShmSegment::IsAlive).
//
// Allreduce, per piece of a slot's size: each rank copies its piece, but
// for its own part, into its slot; barrier; rank r reduces the r-th part
// of the piece over all ranks in rank order (shm_reduce.h: the same bits
// everywhere; its own values read from its tensor) into its slot and its
// output; barrier; each rank copies the other parts out. Broadcast,
// allgather and reduce-scatter need one barrier per piece. Pieces alternate
// between a rank's two slots: a rank writes a slot again only two pieces
// later, after a barrier that every rank passed only when done reading it,
// so no barrier is spent on "done reading". Descriptions alternate the same
// way: a rank can be at most one call ahead of the slowest.

namespace tessera::ddp {

enum class ShmCommunicator::Kind : int32_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier
};

namespace {

constexpr uint64_t kMagic = 0x7465737365726131;  // "tessera1"
constexpr size_t kCacheLine = 128;               // two lines: no false sharing with prefetch

struct Description {
  uint64_t call = 0;
  int32_t kind = 0;
  int32_t dtype = -1;
  int64_t numel = 0;
  int32_t root = -1;
  int32_t op = -1;
};

struct Header {
  uint64_t magic;
  uint64_t local_size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> attached;
};

// A control block's pid when its rank could not use the segment.
constexpr int32_t kFailedToAttach = -1;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

bool Reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

const char* KindName(int32_t kind) {
  switch (kind) {
    case 1: return "allreduce";
    case 2: return "broadcast";
    case 3: return "allgather";
    case 4: return "reduce_scatter";
    case 5: return "barrier";
    default: return "?";
  }
}

}  // namespace

struct alignas(kCacheLine) ShmCommunicator::Control {
  std::atomic<uint32_t> phase;
  std::atomic<uint32_t> sleepers;
  std::atomic<int32_t> pid;
  // Set when this rank's communicator broke: the others stop waiting for it.
  std::atomic<uint32_t> broken;
  Description described[2];  // by call parity
};

// Bytes before the data slots: the header and the control blocks, to a page.
size_t ShmCommunicator::ControlBytes(size_t local_size) {
  return RoundUp(RoundUp(sizeof(Header), kCacheLine) + local_size * sizeof(Control), 4096);
}

size_t ShmCommunicator::SegmentBytes(int local_size, size_t slot_bytes) {
  return ControlBytes(local_size) + 2 * local_size * slot_bytes;
}


ShmCommunicator::ShmCommunicator(std::unique_ptr<ShmSegment> segment, int local_rank,
                                 std::vector<int> global_ranks, size_t slot_bytes,
                                 absl::Duration timeout)
    : segment_(std::move(segment)),
      local_rank_(local_rank),
      global_ranks_(std::move(global_ranks)),
      slot_bytes_(slot_bytes),
      timeout_(timeout),
      data_(static_cast<uint8_t*>(segment_->data()) + ControlBytes(global_ranks_.size())),
      sources_(global_ranks_.size()) {}

ShmCommunicator::Control& ShmCommunicator::control(int local_rank) const {
  auto* base = static_cast<uint8_t*>(segment_->data()) + RoundUp(sizeof(Header), kCacheLine);
  return reinterpret_cast<Control*>(base)[local_rank];
}

uint8_t* ShmCommunicator::slot(int local_rank, int buffer) const {
  return data_ + (static_cast<size_t>(buffer) * local_size() + local_rank) * slot_bytes_;
}

void ShmCommunicator::InitializeSegment() {
  auto* header = static_cast<Header*>(segment_->data());
  header->local_size = local_size();
  header->slot_bytes = slot_bytes_;
  header->attached.store(0);
  // The segment is zero-filled: every phase counter starts at 0.
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kMagic;
}

absl::Status ShmCommunicator::Attach(absl::Time deadline) {
  auto* header = static_cast<Header*>(segment_->data());
  absl::Status usable = segment_->HoldLiveness(local_rank_);
  if (usable.ok() && (header->magic != kMagic ||
                      header->local_size != static_cast<uint64_t>(local_size()) ||
                      header->slot_bytes != slot_bytes_)) {
    usable = absl::FailedPreconditionError(absl::StrCat(
        "shared memory ", segment_->name(), " was not made for ", local_size(),
        " local ranks with ", slot_bytes_, "-byte slots (another job or version?)"));
  }
  if (!usable.ok()) {
    // Tells the others at once rather than at their deadline.
    control(local_rank_).pid.store(kFailedToAttach);
    segment_->Unlink();
    return usable;
  }
  control(local_rank_).pid.store(::getpid());
  if (header->attached.fetch_add(1) + 1 == static_cast<uint32_t>(local_size())) {
    segment_->Unlink();  // See Note [Shared-memory names]
  }
  deadline_ = deadline;
  call_name_ = "set-up";
  first_arrival_ = false;
  // The first phase: every rank has attached (and holds its liveness lock).
  absl::Status attached = Finish(Arrive());
  if (!attached.ok()) segment_->Unlink();
  return attached;
}

absl::Status ShmCommunicator::Begin(Kind kind, const at::Tensor* tensor, int64_t numel, int root,
                                    ReduceOp op) {
  if (!broken_.ok()) return broken_;
  ++calls_;
  Description& mine = control(local_rank_).described[calls_ & 1];
  mine.call = calls_;
  mine.kind = static_cast<int32_t>(kind);
  mine.dtype = tensor != nullptr ? static_cast<int32_t>(tensor->scalar_type()) : -1;
  mine.numel = numel;
  mine.root = root;
  mine.op = static_cast<int32_t>(op);
  call_name_ = KindName(mine.kind);
  first_arrival_ = true;
  deadline_ = absl::Now() + timeout_;
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Finish(absl::Status status) {
  if (!status.ok() && broken_.ok()) {
    broken_ = status;
    Control& mine = control(local_rank_);
    mine.broken.store(1, std::memory_order_seq_cst);
    Futex(&mine.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }
  return status;
}

// Finish returns the cause it records; Abort has nobody to return it to.
void ShmCommunicator::Abort(const absl::Status& cause) { Finish(cause).IgnoreError(); }

absl::Status ShmCommunicator::Arrive() {
  ++phase_;
  Control& mine = control(local_rank_);
  mine.phase.store(phase_, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) > 0) {
    Futex(&mine.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }
  for (int peer = 0; peer < local_size(); ++peer) {
    if (peer == local_rank_) continue;
    if (auto status = WaitForPhase(peer, phase_); !status.ok()) return status;
  }
  if (first_arrival_) {
    first_arrival_ = false;
    return CheckDescriptions();
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::WaitForPhase(int peer, uint32_t phase) {
  std::atomic<uint32_t>& counter = control(peer).phase;
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
  std::atomic<uint32_t>& sleepers = control(peer).sleepers;
  while (true) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = counter.load(std::memory_order_seq_cst);
    if (!Reached(seen, phase)) {
      const timespec slice{0, 20 * 1000 * 1000};
      Futex(&counter, FUTEX_WAIT, seen, &slice);
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (Reached(counter.load(std::memory_order_acquire), phase)) return absl::OkStatus();
    if (control(peer).broken.load() != 0) {
      return absl::UnavailableError(absl::StrCat(
          call_name_, " through shared memory: ", Describe(peer),
          " failed (its own error says why) and left the collective"));
    }
    const int32_t pid = control(peer).pid.load();
    if (pid == kFailedToAttach) {
      return absl::FailedPreconditionError(absl::StrCat(
          call_name_, ": ", Describe(peer), " could not use shared memory ", segment_->name()));
    }
    // A pid of 0: not attached yet (set-up), which is lateness, not death.
    if (pid != 0 && !segment_->IsAlive(peer)) {
      return absl::UnavailableError(
          absl::StrCat(call_name_, " through shared memory: ", Describe(peer),
                       " exited or was killed (its liveness lock on ", segment_->name(),
                       " is gone)"));
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(
          call_name_, " through shared memory did not complete within ",
          absl::FormatDuration(timeout_), ": ", Describe(peer), " did not arrive (",
          kCollectiveTimeoutCauses, ")"));
    }
  }
}

absl::Status ShmCommunicator::CheckDescriptions() const {
  const Description& mine = control(local_rank_).described[calls_ & 1];
  for (int peer = 0; peer < local_size(); ++peer) {
    const Description& theirs = control(peer).described[calls_ & 1];
    if (theirs.call == mine.call && theirs.kind == mine.kind && theirs.dtype == mine.dtype &&
        theirs.numel == mine.numel && theirs.root == mine.root && theirs.op == mine.op) {
      continue;
    }
    auto text = [](const Description& d) {
      return absl::StrCat("call ", d.call, " ", KindName(d.kind), " of ", d.numel, " ",
                          d.dtype >= 0 ? c10::toString(static_cast<c10::ScalarType>(d.dtype))
                                       : "-",
                          " (root ", d.root, ", op ", d.op, ")");
    };
    return absl::InvalidArgumentError(absl::StrCat(
        "mismatched collectives through shared memory: ", Describe(local_rank_), " made ",
        text(mine), ", ", Describe(peer), " made ", text(theirs),
        "; every rank must issue the same collectives in the same order"));
  }
  return absl::OkStatus();
}

std::string ShmCommunicator::Describe(int local_rank) const {
  return absl::StrCat("rank ", global_ranks_[local_rank], " (local rank ", local_rank, ", pid ",
                      control(local_rank).pid.load(), ")");
}

absl::Status ShmCommunicator::Allreduce(const at::Tensor& tensor, ReduceOp op) {
  if (auto status = CheckReducible(tensor.scalar_type(), op); !status.ok()) return status;
  const int64_t numel = tensor.numel();
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kAllreduce, &tensor, numel, -1, op));
  const int n = local_size();
  const size_t element = tensor.element_size();
  const int64_t piece_elements = static_cast<int64_t>(slot_bytes_ / element);
  auto* data = static_cast<uint8_t*>(tensor.data_ptr());
  // Part boundaries of a piece: multiples of 16 elements (whole vectors).
  auto bound = [n](int64_t len, int part) {
    if (part >= n) return len;
    return std::min(len, (len * part / n) & ~int64_t{15});
  };
  int64_t offset = 0;
  do {
    const int64_t len = std::min(piece_elements, numel - offset);
    const int buffer = NextBuffer();
    uint8_t* piece = data + offset * element;
    const int64_t lo = bound(len, local_rank_), hi = bound(len, local_rank_ + 1);
    // The others' parts only: this rank reduces its own part from its
    // tensor (a quarter less memory traffic at two ranks).
    std::memcpy(slot(local_rank_, buffer), piece, lo * element);
    std::memcpy(slot(local_rank_, buffer) + hi * element, piece + hi * element,
                (len - hi) * element);
    TESSERA_RETURN_IF_ERROR(Finish(Arrive()));
    for (int r = 0; r < n; ++r) {
      sources_[r] = (r == local_rank_ ? piece : slot(r, buffer)) + lo * element;
    }
    ReduceElements(tensor.scalar_type(), op, sources_.data(), n, hi - lo, n,
                   slot(local_rank_, buffer) + lo * element, piece + lo * element);
    TESSERA_RETURN_IF_ERROR(Finish(Arrive()));
    for (int r = 0; r < n; ++r) {
      if (r == local_rank_) continue;
      const int64_t from = bound(len, r), to = bound(len, r + 1);
      std::memcpy(piece + from * element, slot(r, buffer) + from * element, (to - from) * element);
    }
    offset += len;
  } while (offset < numel);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(const at::Tensor& tensor, int root) {
  const int64_t numel = tensor.numel();
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kBroadcast, &tensor, numel, root, ReduceOp::kSum));
  const size_t total = tensor.nbytes();
  auto* data = static_cast<uint8_t*>(tensor.data_ptr());
  size_t offset = 0;
  do {
    const size_t len = std::min(slot_bytes_, total - offset);
    const int buffer = NextBuffer();
    if (local_rank_ == root) std::memcpy(slot(root, buffer), data + offset, len);
    TESSERA_RETURN_IF_ERROR(Finish(Arrive()));
    if (local_rank_ != root) std::memcpy(data + offset, slot(root, buffer), len);
    offset += len;
  } while (offset < total);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Allgather(const at::Tensor& input, const at::Tensor& output) {
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kAllgather, &input, input.numel(), -1, ReduceOp::kSum));
  const size_t chunk = input.nbytes();
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  size_t offset = 0;
  do {
    const size_t len = std::min(slot_bytes_, chunk - offset);
    const int buffer = NextBuffer();
    std::memcpy(slot(local_rank_, buffer), in + offset, len);
    TESSERA_RETURN_IF_ERROR(Finish(Arrive()));
    for (int r = 0; r < local_size(); ++r) {
      std::memcpy(out + r * chunk + offset, slot(r, buffer), len);
    }
    offset += len;
  } while (offset < chunk);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::ReduceScatter(const at::Tensor& input, const at::Tensor& output,
                                            ReduceOp op) {
  if (auto status = CheckReducible(input.scalar_type(), op); !status.ok()) return status;
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kReduceScatter, &input, input.numel(), -1, op));
  const int n = local_size();
  const size_t element = input.element_size();
  const int64_t chunk = output.numel();
  const int64_t part = std::max<int64_t>(1, static_cast<int64_t>(slot_bytes_ / element / n));
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  int64_t offset = 0;
  do {
    const int64_t len = std::min(part, chunk - offset);
    const int buffer = NextBuffer();
    for (int k = 0; k < n; ++k) {
      std::memcpy(slot(local_rank_, buffer) + k * part * element,
                  in + (k * chunk + offset) * element, len * element);
    }
    TESSERA_RETURN_IF_ERROR(Finish(Arrive()));
    for (int r = 0; r < n; ++r) sources_[r] = slot(r, buffer) + local_rank_ * part * element;
    ReduceElements(input.scalar_type(), op, sources_.data(), n, len, n,
                   out + offset * element, nullptr);
    offset += len;
  } while (offset < chunk);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Barrier() {
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kBarrier, nullptr, 0, -1, ReduceOp::kSum));
  return Finish(Arrive());
}

}  // namespace tessera::ddp
