// GPipe, 1F1B and Interleaved 1F1B: orders written down directly; the
// zero-bubble plans: orders found by the greedy list scheduler.
#include "pipeline/schedules.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/greedy_order.h"

namespace tessera::pipeline {

namespace {

absl::Status CheckShape(const char* schedule, int workers, int micro_batches) {
  if (workers < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule, " needs at least one worker and one micro-batch (got ", workers,
                     " workers, ", micro_batches, " micro-batches)"));
  }
  return absl::OkStatus();
}

// 1F1B's order of forwards and backwards, one stage a worker: worker r runs
// p - 1 - r forwards, then a forward and a `backward` in turn, then the
// backwards left.
std::vector<std::vector<Action>> OneFOneBOrder(int workers, int micro_batches,
                                               Action (*backward)(int, int)) {
  std::vector<std::vector<Action>> order(workers);
  for (int r = 0; r < workers; ++r) {
    const int warmup = std::min(workers - 1 - r, micro_batches);
    for (int i = 0; i < warmup; ++i) order[r].push_back(Forward(r, i));
    for (int i = 0; i + warmup < micro_batches; ++i) {
      order[r].push_back(Forward(r, i + warmup));
      order[r].push_back(backward(r, i));
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) {
      order[r].push_back(backward(r, i));
    }
  }
  return order;
}

}  // namespace

absl::StatusOr<SchedulePlan> GPipePlan(int workers, int micro_batches) {
  if (auto shape = CheckShape("GPipe", workers, micro_batches); !shape.ok()) return shape;
  std::vector<std::vector<Action>> compute(workers);
  for (int r = 0; r < workers; ++r) {
    for (int i = 0; i < micro_batches; ++i) compute[r].push_back(Forward(r, i));
    for (int i = 0; i < micro_batches; ++i) compute[r].push_back(FullBackward(r, i));
  }
  return WithTransfers("GPipe", micro_batches, LoopedPlacement(workers, 1), compute);
}

absl::StatusOr<SchedulePlan> OneFOneBPlan(int workers, int micro_batches) {
  if (auto shape = CheckShape("1F1B", workers, micro_batches); !shape.ok()) return shape;
  return WithTransfers("1F1B", micro_batches, LoopedPlacement(workers, 1),
                       OneFOneBOrder(workers, micro_batches, FullBackward));
}

absl::StatusOr<SchedulePlan> Interleaved1F1BPlan(int workers, int chunks, int micro_batches) {
  if (auto shape = CheckShape("Interleaved 1F1B", workers, micro_batches); !shape.ok()) {
    return shape;
  }
  if (chunks < 1 || micro_batches % workers != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Interleaved 1F1B needs at least one chunk a worker and micro-batches in groups of the ",
        workers, " workers (got ", chunks, " chunks, ", micro_batches, " micro-batches)"));
  }
  // The k-th forward (backward) of a worker: micro-batches go through each
  // chunk in groups of p, the chunks in model order (backwards: reversed).
  const int total = chunks * micro_batches;
  auto micro_batch_of = [&](int k) { return k / (workers * chunks) * workers + k % workers; };
  auto chunk_of = [&](int k, bool forward) {
    const int chunk = k / workers % chunks;
    return forward ? chunk : chunks - 1 - chunk;
  };
  std::vector<std::vector<Action>> compute(workers);
  for (int r = 0; r < workers; ++r) {
    auto forward = [&](int k) {
      compute[r].push_back(Forward(chunk_of(k, true) * workers + r, micro_batch_of(k)));
    };
    auto backward = [&](int k) {
      compute[r].push_back(FullBackward(chunk_of(k, false) * workers + r, micro_batch_of(k)));
    };
    // Megatron's: one chunk is 1F1B; with more, the first chunk's
    // backwards arrive two hops' worth later for each worker nearer stage 0.
    const int warmup = std::min(
        chunks == 1 ? workers - 1 - r : (workers - r - 1) * 2 + (chunks - 1) * workers, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k + warmup < total; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return WithTransfers(absl::StrCat("Interleaved 1F1B (", chunks, " chunks)"), micro_batches,
                       LoopedPlacement(workers, chunks), compute);
}

absl::StatusOr<SchedulePlan> ZeroBubbleH1Plan(int workers, int micro_batches) {
  if (auto shape = CheckShape("ZB-H1", workers, micro_batches); !shape.ok()) return shape;
  std::vector<int> placement = LoopedPlacement(workers, 1);
  return WithTransfers("ZB-H1", micro_batches, placement,
                       WithWeightsInGaps(placement, micro_batches, /*max_held=*/workers,
                                         OneFOneBOrder(workers, micro_batches, InputBackward)));
}

absl::StatusOr<SchedulePlan> ZeroBubbleVPlan(int workers, int micro_batches) {
  if (auto shape = CheckShape("ZBV", workers, micro_batches); !shape.ok()) return shape;
  std::vector<int> placement = VPlacement(workers);
  // Half a stage's activations a chunk: 2p chunks are 1F1B's p stages.
  return WithTransfers("ZBV", micro_batches, placement,
                       GreedyOrder(placement, micro_batches, /*max_held=*/2 * workers));
}

absl::StatusOr<SchedulePlan> MakePlan(const std::string& name, int workers, int chunks,
                                      int micro_batches) {
  if (name == "interleaved") return Interleaved1F1BPlan(workers, chunks, micro_batches);
  if (name == "zbv") return ZeroBubbleVPlan(workers, micro_batches);
  if (chunks != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule ", name, " runs one chunk a worker, not ", chunks));
  }
  if (name == "gpipe") return GPipePlan(workers, micro_batches);
  if (name == "1f1b") return OneFOneBPlan(workers, micro_batches);
  if (name == "zb-h1") return ZeroBubbleH1Plan(workers, micro_batches);
  return absl::InvalidArgumentError(
      absl::StrCat("no schedule '", name, "': gpipe, 1f1b, interleaved, zb-h1 or zbv"));
}

}  // namespace tessera::pipeline
