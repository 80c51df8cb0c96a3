#include "collectives/shm/shm_communicator.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/shm/shm_reduce.h"
#include "common/status.h"

// Note [Shared-memory collectives]
//
// The segment holds a header, one barrier block per local rank (its phase
// counter and pid: ShmBarrier), the description of each rank's current
// call, and two data slots per local rank. A barrier is a phase: a rank
// stores its next phase in its own counter and waits for every other
// counter to reach it (spins ~20 µs, yields ~200 µs, then sleeps on the
// counter as a futex, which the rank that moves it wakes only when someone
// sleeps there). Waits wake every 20 ms to check the deadline and whether
// the awaited rank is alive (ShmSegment::IsAlive).
//
// The algorithms (collectives/shm/shm_pieces.h, one per file) work in
// pieces of a slot's size. Allreduce: each rank copies its piece, but for
// its own part, into its slot; phase; rank r reduces the r-th part of the
// piece over all ranks in rank order into its slot and its output; phase;
// each rank copies the other parts out. Broadcast, allgather and
// reduce-scatter need one phase per piece. Pieces alternate between a
// rank's two slots: a rank writes a slot again only two pieces later, after
// a phase that every rank passed only when done reading it, so no phase is
// spent on "done reading". Descriptions alternate the same way: a rank can
// be at most one call ahead of the slowest.

namespace tessera::collectives {

enum class ShmCommunicator::Kind : int32_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier
};

namespace {

constexpr uint64_t kMagic = 0x7465737365726132;  // "tessera2": the layout's version
constexpr size_t kCacheLine = 128;

struct Header {
  uint64_t magic;
  uint64_t local_size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> attached;
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t BlocksOffset() { return RoundUp(sizeof(Header), kCacheLine); }

const char* KindName(int32_t kind) {
  switch (kind) {
    case 1:
      return "allreduce";
    case 2:
      return "broadcast";
    case 3:
      return "allgather";
    case 4:
      return "reduce_scatter";
    case 5:
      return "barrier";
    default:
      return "?";
  }
}

}  // namespace

struct ShmCommunicator::Description {
  uint64_t call = 0;
  int32_t kind = 0;
  int32_t dtype = -1;
  int64_t numel = 0;
  int32_t root = -1;
  int32_t op = -1;
};

// Bytes before the data slots: the header, the barrier's blocks and the
// descriptions (two a rank, by call parity), to a page.
size_t ShmCommunicator::ControlBytes(size_t local_size) {
  return RoundUp(BlocksOffset() + local_size * sizeof(ShmBarrier::Block) +
                     2 * local_size * sizeof(Description),
                 4096);
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
      barrier_(segment_.get(),
               reinterpret_cast<ShmBarrier::Block*>(static_cast<uint8_t*>(segment_->data()) +
                                                    BlocksOffset()),
               local_rank, global_ranks_) {}

ShmCommunicator::Description& ShmCommunicator::described(int local_rank, uint64_t parity) const {
  auto* base = static_cast<uint8_t*>(segment_->data()) + BlocksOffset() +
               global_ranks_.size() * sizeof(ShmBarrier::Block);
  return reinterpret_cast<Description*>(base)[2 * local_rank + (parity & 1)];
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
  if (usable.ok() &&
      (header->magic != kMagic || header->local_size != static_cast<uint64_t>(local_size()) ||
       header->slot_bytes != slot_bytes_)) {
    usable = absl::FailedPreconditionError(
        absl::StrCat("shared memory ", segment_->name(), " was not made for ", local_size(),
                     " local ranks with ", slot_bytes_, "-byte slots (another job or version?)"));
  }
  if (!usable.ok()) {
    // Tells the others at once rather than at their deadline.
    barrier_.MarkFailedToAttach();
    segment_->Unlink();
    return usable;
  }
  barrier_.MarkAttached();
  if (header->attached.fetch_add(1) + 1 == static_cast<uint32_t>(local_size())) {
    segment_->Unlink();  // See Note [Shared-memory names]
  }
  deadline_ = deadline;
  call_name_ = "set-up";
  first_arrival_ = false;
  // The first phase: every rank has attached (and holds its liveness lock).
  absl::Status attached = Phase();
  if (!attached.ok()) segment_->Unlink();
  return attached;
}

absl::Status ShmCommunicator::Begin(Kind kind, const at::Tensor* tensor, int64_t numel, int root,
                                    ReduceOp op) {
  if (!broken_.ok()) return broken_;
  ++calls_;
  Description& mine = described(local_rank_, calls_);
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
    barrier_.Break();
  }
  return status;
}

// Finish returns the cause it records; Abort has nobody to return it to.
void ShmCommunicator::Abort(const absl::Status& cause) { Finish(cause).IgnoreError(); }

uint8_t* ShmCommunicator::slot(int local_rank, int buffer) const {
  return data_ + (static_cast<size_t>(buffer) * local_size() + local_rank) * slot_bytes_;
}

absl::Status ShmCommunicator::Phase() {
  absl::Status status = barrier_.Arrive(call_name_, deadline_, timeout_);
  // The first phase of a call: every rank has described it.
  if (status.ok() && first_arrival_) {
    first_arrival_ = false;
    status = CheckDescriptions();
  }
  return Finish(std::move(status));
}

absl::Status ShmCommunicator::CheckDescriptions() const {
  const Description& mine = described(local_rank_, calls_);
  for (int peer = 0; peer < local_size(); ++peer) {
    const Description& theirs = described(peer, calls_);
    if (theirs.call == mine.call && theirs.kind == mine.kind && theirs.dtype == mine.dtype &&
        theirs.numel == mine.numel && theirs.root == mine.root && theirs.op == mine.op) {
      continue;
    }
    auto text = [](const Description& d) {
      return absl::StrCat("call ", d.call, " ", KindName(d.kind), " of ", d.numel, " ",
                          d.dtype >= 0 ? c10::toString(static_cast<c10::ScalarType>(d.dtype)) : "-",
                          " (root ", d.root, ", op ", d.op, ")");
    };
    return absl::InvalidArgumentError(absl::StrCat(
        "mismatched collectives through shared memory: ", barrier_.Describe(local_rank_), " made ",
        text(mine), ", ", barrier_.Describe(peer), " made ", text(theirs),
        "; every rank must issue the same collectives in the same order"));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Allreduce(const at::Tensor& tensor, ReduceOp op) {
  TESSERA_RETURN_IF_ERROR(CheckReducible(tensor.scalar_type(), op));
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kAllreduce, &tensor, tensor.numel(), -1, op));
  return ShmAllreduce(*this, tensor, op);
}

absl::Status ShmCommunicator::Broadcast(const at::Tensor& tensor, int root) {
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kBroadcast, &tensor, tensor.numel(), root, ReduceOp::kSum));
  return ShmBroadcast(*this, tensor, root);
}

absl::Status ShmCommunicator::Allgather(const at::Tensor& input, const at::Tensor& output) {
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kAllgather, &input, input.numel(), -1, ReduceOp::kSum));
  return ShmAllgather(*this, input, output);
}

absl::Status ShmCommunicator::ReduceScatter(const at::Tensor& input, const at::Tensor& output,
                                            ReduceOp op) {
  TESSERA_RETURN_IF_ERROR(CheckReducible(input.scalar_type(), op));
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kReduceScatter, &input, input.numel(), -1, op));
  return ShmReduceScatter(*this, input, output, op);
}

absl::Status ShmCommunicator::Barrier() {
  TESSERA_RETURN_IF_ERROR(Begin(Kind::kBarrier, nullptr, 0, -1, ReduceOp::kSum));
  return Phase();
}

}  // namespace tessera::collectives
