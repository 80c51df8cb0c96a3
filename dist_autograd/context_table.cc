#include "dist_autograd/context_table.h"

namespace tessera::dist_autograd {
namespace {

// How many released ids each worker remembers, to ignore late messages.
constexpr size_t kReleasedMemory = 1 << 16;

}  // namespace

void ContextTable::Add(int64_t id) {
  MutexLock lock(&mu_);
  contexts_[id] = std::make_shared<Context>(id);
  changed_.SignalAll();
}

std::shared_ptr<Context> ContextTable::Find(int64_t id) const {
  MutexLock lock(&mu_);
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : it->second;
}

std::shared_ptr<Context> ContextTable::FindOrCreate(int64_t id) {
  MutexLock lock(&mu_);
  auto& context = contexts_[id];
  if (context == nullptr) {
    if (released_.count(id) > 0) {
      contexts_.erase(id);
      return nullptr;
    }
    context = std::make_shared<Context>(id);
    changed_.SignalAll();
  }
  return context;
}

std::shared_ptr<Context> ContextTable::Take(int64_t id) {
  MutexLock lock(&mu_);
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return nullptr;
  std::shared_ptr<Context> context = std::move(it->second);
  contexts_.erase(it);
  if (released_.insert(id).second) released_order_.push_back(id);
  if (released_order_.size() > kReleasedMemory) {
    released_.erase(released_order_.front());
    released_order_.pop_front();
  }
  changed_.SignalAll();
  return context;
}

void ContextTable::Clear() {
  std::map<int64_t, std::shared_ptr<Context>> dropped;  // graphs die after the lock
  MutexLock lock(&mu_);
  dropped.swap(contexts_);
  changed_.SignalAll();
}

std::vector<int64_t> ContextTable::IdsOf(int rank, int rank_shift) const {
  std::vector<int64_t> ids;
  MutexLock lock(&mu_);
  for (const auto& [id, context] : contexts_) {
    if ((id >> rank_shift) == rank) ids.push_back(id);
  }
  return ids;
}

size_t ContextTable::size() const {
  MutexLock lock(&mu_);
  return contexts_.size();
}

bool ContextTable::WaitForSize(size_t count, absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return changed_.WaitUntil(
      &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return contexts_.size() == count; },
      absl::Now() + timeout);
}

}  // namespace tessera::dist_autograd
