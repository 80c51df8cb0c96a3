#include "ps/op_log.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

namespace tessera::ps {

int64_t OpLog::Next() {
  MutexLock lock(&mu_);
  return ++last_;
}

int64_t OpLog::last() const {
  MutexLock lock(&mu_);
  return last_;
}

void OpLog::ReleaseLocked(Ready* ready) {
  int64_t everywhere = last_;
  for (const auto& [backup, lsn] : confirmed_) everywhere = std::min(everywhere, lsn);
  while (!waits_.empty() && waits_.begin()->first <= everywhere) {
    ready->emplace_back(std::move(waits_.begin()->second), absl::OkStatus());
    waits_.erase(waits_.begin());
  }
}

void OpLog::Complete(Ready& ready) {
  for (auto& [promise, status] : ready) {
    if (status.ok()) {
      promise.Set(std::monostate{});
    } else {
      promise.Set(status);
    }
  }
}

void OpLog::SetBackups(const std::vector<std::string>& backups) {
  Ready ready;
  {
    MutexLock lock(&mu_);
    std::map<std::string, int64_t> confirmed;
    for (const std::string& backup : backups) {
      auto it = heard_.find(backup);
      confirmed[backup] = it == heard_.end() ? 0 : it->second;
    }
    // A backup that left starts from nothing should it join again.
    for (const auto& [backup, lsn] : confirmed_) {
      if (confirmed.count(backup) == 0) heard_.erase(backup);
    }
    confirmed_.swap(confirmed);
    ReleaseLocked(&ready);
  }
  Complete(ready);
}

void OpLog::Confirm(const std::string& backup, int64_t lsn) {
  Ready ready;
  {
    MutexLock lock(&mu_);
    int64_t& heard = heard_[backup];
    heard = std::max(heard, lsn);
    auto it = confirmed_.find(backup);
    if (it == confirmed_.end()) return;
    it->second = heard;
    ReleaseLocked(&ready);
  }
  Complete(ready);
}

Future<std::monostate> OpLog::Replicated(int64_t lsn) {
  Promise<std::monostate> promise;
  Future<std::monostate> done = promise.GetFuture();
  Ready ready;
  {
    MutexLock lock(&mu_);
    if (!failed_.ok()) return Future<std::monostate>::Ready(failed_);
    waits_.emplace(lsn, std::move(promise));
    ReleaseLocked(&ready);
  }
  Complete(ready);
  return done;
}

void OpLog::FailWaits(const absl::Status& status) {
  Ready ready;
  {
    MutexLock lock(&mu_);
    failed_ = status;
    for (auto& [lsn, promise] : waits_) ready.emplace_back(std::move(promise), status);
    waits_.clear();
  }
  Complete(ready);
}

Future<std::monostate> OpLog::Follow(int64_t term, int64_t lsn,
                                     std::function<absl::Status()> apply) {
  std::optional<Future<std::monostate>> done;
  {
    MutexLock lock(&mu_);
    if (term < term_) {
      return Future<std::monostate>::Ready(absl::AbortedError(
          "a change of a replaced primary (this replica follows a newer one, or leads)"));
    }
    term_ = term;
    if (lsn <= last_) return Future<std::monostate>::Ready(std::monostate{});
    auto [it, added] = pending_.try_emplace(lsn);
    if (added) it->second.apply = std::move(apply);
    done = it->second.done.GetFuture();
  }
  Drain();
  return *done;
}

void OpLog::Drain() {
  MutexLock order(&apply_mu_);
  for (;;) {
    Pending next;
    {
      MutexLock lock(&mu_);
      if (held_ || pending_.empty() || pending_.begin()->first != last_ + 1) return;
      next = std::move(pending_.begin()->second);
      pending_.erase(pending_.begin());
      ++last_;  // taken: a repeat of it is answered at once
    }
    const absl::Status applied = next.apply();
    Ready ready;
    ready.emplace_back(std::move(next.done), applied);
    Complete(ready);
  }
}

void OpLog::Promote(const absl::Status& status) {
  MutexLock order(&apply_mu_);
  Ready ready;
  {
    MutexLock lock(&mu_);
    for (auto& [lsn, pending] : pending_) ready.emplace_back(std::move(pending.done), status);
    pending_.clear();
    confirmed_.clear();
    heard_.clear();
    failed_ = absl::OkStatus();
    term_ = INT64_MAX;
  }
  Complete(ready);
}

void OpLog::Hold() {
  MutexLock lock(&mu_);
  held_ = true;
}

bool OpLog::held() const {
  MutexLock lock(&mu_);
  return held_;
}

void OpLog::StartAt(int64_t lsn) {
  Ready ready;
  {
    MutexLock order(&apply_mu_);
    MutexLock lock(&mu_);
    last_ = std::max(last_, lsn);
    while (!pending_.empty() && pending_.begin()->first <= last_) {
      ready.emplace_back(std::move(pending_.begin()->second.done), absl::OkStatus());
      pending_.erase(pending_.begin());
    }
    held_ = false;
  }
  Complete(ready);
  Drain();
}

}  // namespace tessera::ps
