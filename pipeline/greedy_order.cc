#include "pipeline/greedy_order.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

namespace tessera::pipeline {
namespace {

constexpr int kNever = std::numeric_limits<int>::max();

class Greedy {
 public:
  Greedy(const std::vector<int>& worker_of_stage, int micro_batches, int max_held,
         std::vector<std::vector<Action>> forward_backward)
      : placement_(worker_of_stage),
        stages_(static_cast<int>(worker_of_stage.size())),
        micro_batches_(micro_batches),
        max_held_(max_held),
        forward_end_(stages_, std::vector<int>(micro_batches, kNever)),
        backward_end_(stages_, std::vector<int>(micro_batches, kNever)),
        next_forward_(stages_, 0),
        given_(std::move(forward_backward)) {
    workers_ = 1 + *std::max_element(placement_.begin(), placement_.end());
    next_given_.assign(workers_, 0);
    order_.resize(workers_);
    owed_.resize(workers_);
    held_.assign(workers_, 0);
  }

  std::vector<std::vector<Action>> Run() {
    const size_t total = static_cast<size_t>(3) * stages_ * micro_batches_;
    size_t started = 0;
    // Every unit of time something becomes ready or a W is started, so the
    // step ends within a bound of its work; the bound guards a bad max_held.
    for (int t = 0; started < total && t < static_cast<int>(4 * total) + 4 * stages_; ++t) {
      std::vector<std::optional<Action>> chosen(workers_);
      for (int w = 0; w < workers_; ++w) chosen[w] = Choose(w, t);
      for (int w = 0; w < workers_; ++w) {
        if (chosen[w].has_value()) {
          Start(w, *chosen[w], t);
          ++started;
        }
      }
    }
    return order_;
  }

 private:
  // Whether `a`'s input is there at time t (results are there one unit
  // after their action started).
  bool InputReady(const Action& a, int t) const {
    if (a.kind == ActionKind::kForward) {
      return a.stage == 0 || forward_end_[a.stage - 1][a.micro_batch] <= t;
    }
    if (forward_end_[a.stage][a.micro_batch] > t) return false;
    return a.stage == stages_ - 1 || backward_end_[a.stage + 1][a.micro_batch] <= t;
  }

  // The worker's next F or B in the order given, when there is one and it
  // can start: its input is there and, for an F, memory allows.
  std::optional<Action> NextGiven(int w, int t) const {
    if (next_given_[w] >= given_[w].size()) return std::nullopt;
    const Action& a = given_[w][next_given_[w]];
    if (!InputReady(a, t)) return std::nullopt;
    if (a.kind == ActionKind::kForward && held_[w] >= max_held_) return std::nullopt;
    return a;
  }

  std::optional<Action> Choose(int w, int t) const {
    if (!given_.empty()) {
      if (auto a = NextGiven(w, t)) return a;
      if (!owed_[w].empty()) return owed_[w].front();
      return std::nullopt;
    }
    std::optional<Action> backward, forward;
    for (int s = stages_ - 1; s >= 0; --s) {
      if (placement_[s] != w) continue;
      for (int i = 0; i < micro_batches_; ++i) {
        const Action b = InputBackward(s, i);
        if (backward_end_[s][i] == kNever && InputReady(b, t) &&
            (!backward || i < backward->micro_batch)) {
          backward = b;
        }
      }
      if (!forward && next_forward_[s] < micro_batches_ && held_[w] < max_held_) {
        const Action f = Forward(s, next_forward_[s]);
        if (InputReady(f, t)) forward = f;
      }
    }
    if (backward) return backward;
    if (forward) return forward;
    if (!owed_[w].empty()) return owed_[w].front();
    return std::nullopt;
  }

  void Start(int w, const Action& a, int t) {
    order_[w].push_back(a);
    if (!given_.empty() && a.kind != ActionKind::kWeightBackward) ++next_given_[w];
    switch (a.kind) {
      case ActionKind::kForward:
        forward_end_[a.stage][a.micro_batch] = t + 1;
        ++next_forward_[a.stage];
        ++held_[w];
        break;
      case ActionKind::kInputBackward:
        backward_end_[a.stage][a.micro_batch] = t + 1;
        owed_[w].push_back(WeightBackward(a.stage, a.micro_batch));
        break;
      default:  // kWeightBackward, the oldest owed
        owed_[w].pop_front();
        --held_[w];
        break;
    }
  }

  const std::vector<int> placement_;
  const int stages_, micro_batches_, max_held_;
  int workers_ = 0;
  std::vector<std::vector<int>> forward_end_, backward_end_;  // stage -> micro-batch -> end
  std::vector<int> next_forward_;                             // stage -> its next F's micro-batch
  std::vector<std::vector<Action>> order_;                    // worker -> what it started
  std::vector<std::deque<Action>> owed_;                      // worker -> its Ws, oldest first
  std::vector<int> held_;                                     // worker -> activations held
  const std::vector<std::vector<Action>> given_;  // worker -> its Fs and Bs in order, if given
  std::vector<size_t> next_given_;                // worker -> the next of them
};

}  // namespace

std::vector<std::vector<Action>> GreedyOrder(const std::vector<int>& worker_of_stage,
                                             int micro_batches, int max_held) {
  if (worker_of_stage.empty() || micro_batches < 1) return {};
  return Greedy(worker_of_stage, micro_batches, max_held, {}).Run();
}

std::vector<std::vector<Action>> WithWeightsInGaps(const std::vector<int>& worker_of_stage,
                                                   int micro_batches, int max_held,
                                                   std::vector<std::vector<Action>> order) {
  if (worker_of_stage.empty() || micro_batches < 1) return {};
  return Greedy(worker_of_stage, micro_batches, max_held, std::move(order)).Run();
}

}  // namespace tessera::pipeline
