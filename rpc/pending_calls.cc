#include "rpc/pending_calls.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tessera::rpc {

uint64_t PendingCalls::Add(Promise<Message> promise, int to_rank, uint64_t connection_id,
                           const std::string& target, absl::Time deadline) {
  uint64_t id = 0;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
    Call call;
    call.promise = std::move(promise);
    call.connection_id = connection_id;
    call.to_rank = to_rank;
    call.target = target;
    call.started = absl::Now();
    calls_.emplace(id, std::move(call));
  }
  if (deadline == absl::InfiniteFuture()) return id;
  const auto timer_id = timer_->Schedule(deadline, [this, id, to_rank] {
    Complete(id, absl::DeadlineExceededError(
                     absl::StrCat("call to worker ", peer_name_(to_rank), " timed out")));
  });
  MutexLock lock(&mu_);
  auto it = calls_.find(id);
  if (it != calls_.end()) it->second.timer_id = timer_id;
  return id;
}

void PendingCalls::Complete(uint64_t request_id, absl::StatusOr<Message> result) {
  Call call;
  {
    MutexLock lock(&mu_);
    auto it = calls_.find(request_id);
    if (it == calls_.end()) return;  // already answered, timed out or failed
    call = std::move(it->second);
    calls_.erase(it);
  }
  Finish(std::move(call), std::move(result));
}

size_t PendingCalls::FailConnection(uint64_t connection_id, const absl::Status& status) {
  std::vector<Call> failed;
  {
    MutexLock lock(&mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.connection_id == connection_id) {
        failed.push_back(std::move(it->second));
        it = calls_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Call& call : failed) Finish(std::move(call), status);
  return failed.size();
}

void PendingCalls::FailConnectionAndWarn(uint64_t connection_id, const absl::Status& status,
                                         const std::string& self, bool warn) {
  // Read before the calls fail, so that TSan orders this read before a
  // waiter's release of the status (Abseil's reference count is invisible
  // to it: tsan_suppressions.cc).
  const std::string warning = absl::StrCat(self, ": ", status.message());
  const size_t failed = FailConnection(connection_id, status);
  if (failed > 0 && warn) {
    TESSERA_LOG(WARNING) << warning << " (" << failed << " calls failed)";
  }
}

void PendingCalls::FailAll(const absl::Status& reason) {
  std::map<uint64_t, Call> failed;
  {
    MutexLock lock(&mu_);
    failed.swap(calls_);
  }
  for (auto& [id, call] : failed) Finish(std::move(call), reason);
}

AgentCounters PendingCalls::Counts() const {
  MutexLock lock(&mu_);
  AgentCounters counts;
  counts.requests_sent = next_id_ - 1;  // ids are handed out from 1, one per call
  counts.responses_received = completed_;
  return counts;
}

void PendingCalls::Finish(Call call, absl::StatusOr<Message> result) {
  // Cancel() waits for a timer callback under way, so none outlives us.
  timer_->Cancel(call.timer_id);
  if (!result.ok() && absl::IsDeadlineExceeded(result.status())) {
    result = absl::DeadlineExceededError(absl::StrCat(
        result.status().message(), ": '", call.target, "' got no response within ",
        absl::FormatDuration(absl::Now() - call.started)));
  }
  {
    MutexLock lock(&mu_);
    ++completed_;
  }
  call.promise.Set(std::move(result));
}

}  // namespace tessera::rpc
