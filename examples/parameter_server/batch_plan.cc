#include "examples/parameter_server/batch_plan.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::examples {

BatchPlan::BatchPlan(int64_t samples, int64_t batch, int epochs, uint64_t seed, int64_t max_steps)
    : samples_(samples),
      batch_(batch),
      epochs_(epochs),
      seed_(seed),
      steps_per_epoch_(max_steps > 0 ? std::min(max_steps, (samples + batch - 1) / batch)
                                     : (samples + batch - 1) / batch) {}

absl::StatusOr<std::optional<Batch>> BatchPlan::Next(const std::string& trainer, int incarnation,
                                                     bool more, absl::Time deadline,
                                                     int64_t* acked) {
  MutexLock lock(&mu_);
  if (acked != nullptr) *acked = 0;
  if (auto it = leases_.find(trainer); it != leases_.end()) {
    if (it->second.incarnation == incarnation) {
      leases_.erase(it);
      ++done_;
      ++done_by_[trainer];
      if (acked != nullptr) *acked = done_;
      changed_.SignalAll();
    } else {
      ReturnLocked(it);  // its process died mid-batch
    }
  }
  if (!more) return std::nullopt;
  const bool ready = changed_.WaitUntil(
      &mu_,
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !returned_.empty() || next_fresh_ < steps_total() || done_ == steps_total();
      },
      deadline);
  if (!ready) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no batch came free for '", trainer, "': ", leases_.size(), " still leased to others"));
  }
  if (done_ == steps_total() && returned_.empty() && next_fresh_ == steps_total()) {
    return std::nullopt;
  }
  int64_t step;
  if (!returned_.empty()) {
    step = returned_.front();
    returned_.pop_front();
  } else {
    step = next_fresh_++;
  }
  leases_[trainer] = Lease{incarnation, step};
  return Batch{static_cast<int>(step / steps_per_epoch_), step, IndicesOf(step)};
}

void BatchPlan::Release(const std::string& trainer, int incarnation) {
  MutexLock lock(&mu_);
  auto it = leases_.find(trainer);
  if (it != leases_.end() && it->second.incarnation <= incarnation) ReturnLocked(it);
}

void BatchPlan::ReturnLocked(std::map<std::string, Lease>::iterator lease) {
  returned_.push_front(lease->second.step);
  leases_.erase(lease);
  changed_.SignalAll();
}

int64_t BatchPlan::steps_done() const {
  MutexLock lock(&mu_);
  return done_;
}

std::map<std::string, int64_t> BatchPlan::StepsByTrainer() const {
  MutexLock lock(&mu_);
  return done_by_;
}

std::vector<int64_t> BatchPlan::Position() const {
  MutexLock lock(&mu_);
  std::vector<int64_t> position = {done_, next_fresh_};
  position.insert(position.end(), returned_.begin(), returned_.end());
  for (const auto& [trainer, lease] : leases_) position.push_back(lease.step);
  return position;
}

void BatchPlan::Restore(const std::vector<int64_t>& position) {
  MutexLock lock(&mu_);
  const bool fits = position.size() >= 2 && position[1] <= steps_total() &&
                    position[0] + static_cast<int64_t>(position.size()) - 2 == position[1];
  if (!fits) {
    throw StatusError(absl::DataLossError(absl::StrCat(
        "the checkpoint's batch plan does not fit this one (", steps_total(), " steps)")));
  }
  done_ = position[0];
  next_fresh_ = position[1];
  returned_.assign(position.begin() + 2, position.end());
  leases_.clear();
}

std::vector<int64_t> BatchPlan::IndicesOf(int64_t step) {
  const int epoch = static_cast<int>(step / steps_per_epoch_);
  auto [it, fresh] = permutations_.try_emplace(epoch);
  if (fresh) {
    it->second.resize(static_cast<size_t>(samples_));
    std::iota(it->second.begin(), it->second.end(), 0);
    std::mt19937_64 random(seed_ * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(it->second.begin(), it->second.end(), random);
  }
  const int64_t begin = (step % steps_per_epoch_) * batch_;
  const int64_t end = std::min(begin + batch_, samples_);
  return std::vector<int64_t>(it->second.begin() + begin, it->second.begin() + end);
}

}  // namespace tessera::examples
