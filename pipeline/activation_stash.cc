#include "pipeline/activation_stash.h"

#include <algorithm>

namespace tessera::pipeline {

void ActivationStash::Put(int64_t context, int64_t micro, StashedMicroBatch entry,
                          const std::function<bool(int64_t context)>& is_live) {
  MutexLock lock(&mu_);
  for (auto it = kept_.begin(); it != kept_.end();) {
    it = it->first.first != context && !is_live(it->first.first) ? kept_.erase(it) : std::next(it);
  }
  kept_[{context, micro}] = std::move(entry);
  peak_ = std::max<int64_t>(peak_, static_cast<int64_t>(kept_.size()));
}

std::optional<StashedMicroBatch> ActivationStash::Take(int64_t context, int64_t micro) {
  MutexLock lock(&mu_);
  auto it = kept_.find({context, micro});
  if (it == kept_.end()) return std::nullopt;
  StashedMicroBatch entry = std::move(it->second);
  kept_.erase(it);
  return entry;
}

int64_t ActivationStash::live() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(kept_.size());
}

int64_t ActivationStash::peak() const {
  MutexLock lock(&mu_);
  return peak_;
}

void ActivationStash::ResetPeak() {
  MutexLock lock(&mu_);
  peak_ = static_cast<int64_t>(kept_.size());
}

}  // namespace tessera::pipeline
