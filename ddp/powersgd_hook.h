// PowerSGD: gradient compression by a rank-r approximation, as a DDP
// communication hook (Vogels et al. 2019; PyTorch's powerSGD_hook).
//
//   ddp::PowerSgdOptions power;
//   power.matrix_rank = 2;
//   options.comm_hook = std::make_shared<ddp::PowerSgdHook>(power);
//
// Note [PowerSGD]
// Each gradient of two or more dimensions is viewed as an n x m matrix M
// (n = its first dimension). With Q an m x r matrix (random at first, the
// same on every rank; with warm start, the previous step's afterwards):
//   P = M Q, allreduced (sum); P's columns orthonormalised;
//   Q = M^T P, allreduced (average); M ~ P Q^T.
// So a matrix costs r (n + m) elements on the wire instead of n m. It is
// only compressed when that is at least `min_compression_rate` times fewer;
// vectors (biases) and matrices not worth it are packed into one flat
// allreduce. With error feedback, what the approximation left out of this
// rank's gradient is added to its next one, so nothing is lost over steps —
// what makes the method converge like plain SGD. The first `start_step`
// passes are plain allreduces: DDP rebuilds its buckets after the first pass
// (see Note [Bucket rebuild]), and the state is kept per bucket.
//
// A bucket's collectives (the flat one, P, then Q: Q needs P's result) are
// chained after the previous bucket's, so every rank issues them in the
// same order; compression overlaps backward, not the buckets with each other.
//
// Thread-safety: Reduce is called by the Reducer (one pass at a time); the
// chained work runs on the process group's threads, one bucket at a time.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "ddp/comm_hook.h"

namespace tessera::ddp {

struct PowerSgdOptions {
  int64_t matrix_rank = 1;  // r
  int64_t start_step = 2;   // passes of plain allreduce first (>= 2, see the Note)
  double min_compression_rate = 2;
  bool error_feedback = true;
  bool warm_start = true;
  uint64_t seed = 0;  // for the initial Qs: the same on every rank
};

class PowerSgdHook final : public CommHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions options);
  ~PowerSgdHook() override;

  collectives::Work Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) override;
  std::string name() const override;

  // Bytes this rank has put into collectives so far (payloads only).
  int64_t bytes_communicated() const { return bytes_.load(); }

  // Whether an n x m matrix is sent compressed at `rank` (see Note [PowerSGD]).
  static bool Compresses(int64_t n, int64_t m, int64_t rank, double min_compression_rate);

  struct BucketState;

 private:
  struct Compression;
  collectives::Work Compress(const GradBucket& bucket, collectives::ProcessGroup& group,
                             const std::shared_ptr<BucketState>& state);
  std::shared_ptr<Compression> Begin(const GradBucket& bucket, collectives::ProcessGroup& group,
                                     const std::shared_ptr<BucketState>& state);
  collectives::Work ExchangeQ(Compression& step, collectives::ProcessGroup& group);
  void Finish(Compression& step, int world);
  // Counts the bytes; an empty tensor is not sent.
  collectives::Work Allreduce(collectives::ProcessGroup& group, const at::Tensor& tensor,
                              collectives::ReduceOp op);

  const PowerSgdOptions options_;
  std::atomic<int64_t> bytes_{0};
  Mutex mu_;
  std::map<size_t, std::shared_ptr<BucketState>> buckets_ ABSL_GUARDED_BY(mu_);
  collectives::Work tail_ ABSL_GUARDED_BY(mu_);  // the last bucket's chain
};

}  // namespace tessera::ddp
