// ContextTable: the distributed autograd contexts one worker holds, by id,
// and the ids it released recently — so that a message of a released
// context that arrives late is not recorded into a new one.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "dist_autograd/context.h"

namespace tessera::dist_autograd {

class ContextTable {
 public:
  // A new context under `id` (one this worker made).
  void Add(int64_t id);
  // nullptr if this worker holds no such context.
  std::shared_ptr<Context> Find(int64_t id) const;
  // The context, made here when a peer's message first names it; nullptr if
  // the id was released here recently (a late message).
  std::shared_ptr<Context> FindOrCreate(int64_t id);
  // Removes the context and remembers its id as released; nullptr if it was
  // never here or is released already.
  std::shared_ptr<Context> Take(int64_t id);
  // Drops every context (the runtime closed); their graphs die outside the
  // lock.
  void Clear();

  // The ids held here whose bits above `rank_shift` are `rank`.
  std::vector<int64_t> IdsOf(int rank, int rank_shift) const;
  size_t size() const;
  // A bounded wait until `count` contexts are held; false on timeout.
  bool WaitForSize(size_t count, absl::Duration timeout) const;

 private:
  mutable Mutex mu_;
  mutable CondVar changed_;
  std::map<int64_t, std::shared_ptr<Context>> contexts_ ABSL_GUARDED_BY(mu_);
  // Recently released ids, oldest first (bounded).
  std::set<int64_t> released_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> released_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::dist_autograd
