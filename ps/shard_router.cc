#include "ps/shard_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::ps {

struct ShardRouter::Routed {
  uint64_t id = 0;
  int64_t shard = 0;
  const char* service = nullptr;
  Encode encode;
  absl::Time deadline;
  Promise<c10::IValue> result;
  // Guarded by the router's lock: the attempt whose failure counts (a
  // call sent again supersedes the one before), where and how it went.
  uint64_t attempt = 0;
  std::string server;
  int64_t epoch = 0;
};

namespace {

absl::Status Annotated(const absl::Status& status, int64_t shard, const std::string& server) {
  return absl::Status(status.code(), absl::StrCat("shard ", shard, " on parameter server '", server,
                                                  "': ", status.message()));
}

}  // namespace

std::shared_ptr<ShardRouter> ShardRouter::Make(rpc::Runtime& runtime, std::string job, ShardMap map,
                                               absl::Duration poll, bool wait_for_lost) {
  return std::shared_ptr<ShardRouter>(
      new ShardRouter(runtime, std::move(job), std::move(map), poll, wait_for_lost));
}

ShardRouter::ShardRouter(rpc::Runtime& runtime, std::string job, ShardMap map, absl::Duration poll,
                         bool wait_for_lost)
    : runtime_(runtime),
      job_(std::move(job)),
      poll_(poll),
      wait_for_lost_(wait_for_lost),
      map_(std::move(map)) {}

ShardMap ShardRouter::map() const {
  MutexLock lock(&mu_);
  return map_;
}

Future<c10::IValue> ShardRouter::Call(int64_t shard, const char* service, Encode encode,
                                      absl::Time deadline) {
  auto call = std::make_shared<Routed>();
  call->shard = shard;
  call->service = service;
  call->encode = std::move(encode);
  call->deadline = deadline;
  Future<c10::IValue> result = call->result.GetFuture();
  bool poll = false;
  {
    MutexLock lock(&mu_);
    call->id = next_id_++;
    in_flight_[call->id] = call;
    poll = !polling_;
    polling_ = true;
  }
  Send(call);
  if (poll) SchedulePoll();
  return result;
}

void ShardRouter::Send(const std::shared_ptr<Routed>& call) {
  std::string server;
  int64_t epoch = 0;
  uint64_t attempt = 0;
  bool poll = false;
  {
    MutexLock lock(&mu_);
    server = map_.primary(call->shard);
    epoch = map_.epoch;
    attempt = ++call->attempt;
    call->server = server;
    call->epoch = epoch;
    if (server.empty()) {
      if (!wait_for_lost_ || absl::Now() >= call->deadline) {
        in_flight_.erase(call->id);
      } else {
        // Waits for a restarted server to restore it (Poll sends it then).
        poll = !polling_;
        polling_ = true;
        server = "-";
      }
    }
  }
  if (server == "-") {
    if (poll) SchedulePoll();
    return;
  }
  if (server.empty()) {
    call->result.Set(absl::UnavailableError(absl::StrCat(
        "shard ", call->shard, " lost every replica at shard map epoch ", epoch,
        wait_for_lost_ ? ", and no server restored it from a checkpoint by the call's deadline"
                       : " (restore it from a checkpoint)")));
    return;
  }
  std::weak_ptr<ShardRouter> weak = weak_from_this();
  runtime_
      .CallAsync(server, call->service, call->encode(epoch),
                 rpc::CallOptions(std::max(call->deadline - absl::Now(), absl::Milliseconds(1))))
      .OnReady([weak, call, attempt, server, epoch](const absl::StatusOr<c10::IValue>& answer) {
        auto self = weak.lock();
        if (answer.ok() || self == nullptr) {
          // An answer is an answer, from whichever attempt.
          if (self) {
            MutexLock lock(&self->mu_);
            self->in_flight_.erase(call->id);
          }
          call->result.Set(answer.ok() ? answer : Annotated(answer.status(), call->shard, server));
          return;
        }
        self->Failed(call, attempt, server, epoch, answer.status());
      });
}

void ShardRouter::Failed(const std::shared_ptr<Routed>& call, uint64_t attempt,
                         const std::string& server, int64_t epoch, const absl::Status& status) {
  const bool route_again = status.code() == absl::StatusCode::kAborted ||
                           status.code() == absl::StatusCode::kUnavailable;
  bool give_up = false;
  {
    MutexLock lock(&mu_);
    if (attempt != call->attempt) return;  // sent again since: that attempt decides
    give_up = !route_again || absl::Now() >= call->deadline;
    if (give_up) in_flight_.erase(call->id);
  }
  if (give_up) {
    call->result.Set(Annotated(status, call->shard, server));
    return;
  }
  // Sent again once the map moved on from the attempt's: the shard's
  // primary replaced (Unavailable) — by another server, or by the same
  // one's new incarnation, which restored it after every replica was lost
  // (its replicas set anew since the attempt) — or any change (Aborted).
  const bool aborted = status.code() == absl::StatusCode::kAborted;
  std::weak_ptr<ShardRouter> weak = weak_from_this();
  auto check = [weak, call, attempt, server, epoch, aborted, status](auto& again) -> void {
    auto self = weak.lock();
    if (!self) return;
    self->Refresh();
    bool send = false, alone = false, expired = false;
    {
      MutexLock lock(&self->mu_);
      if (attempt != call->attempt) return;
      // A server without backups has nobody to fail over to (unless a
      // checkpoint will be restored in its place): judged on the map just
      // read, since one read earlier may predate a backup that joined.
      alone = !aborted && self->map_.primary(call->shard) == server &&
              self->map_.replicas[call->shard].size() < 2 && !self->wait_for_lost_;
      send = !alone && self->map_.epoch > epoch &&
             (aborted || self->map_.primary(call->shard) != server ||
              self->map_.since[call->shard] > epoch);
      expired = !send && absl::Now() >= call->deadline;
      if (alone || expired) self->in_flight_.erase(call->id);
    }
    if (send) {
      self->Send(call);
    } else if (alone) {
      call->result.Set(Annotated(status, call->shard, server));
    } else if (expired) {
      call->result.Set(Annotated(
          absl::DeadlineExceededError(absl::StrCat(
              "waited until the call's deadline for the shard to move to another server after: ",
              status.message())),
          call->shard, server));
    } else {
      self->runtime_.timer().Schedule(absl::Now() + self->poll_, [weak, again]() {
        auto self = weak.lock();
        if (!self) return;
        if (ThreadPool* pool = self->runtime_.live_executor())
          pool->Post([again] { again(again); });
      });
    }
  };
  if (ThreadPool* pool = runtime_.live_executor()) {
    pool->Post([check] { check(check); });
  } else {
    call->result.Set(Annotated(status, call->shard, server));
  }
}

bool ShardRouter::Refresh() {
  auto map = CurrentShardMap(runtime_.store(), job_);
  if (!map.ok()) return false;
  MutexLock lock(&mu_);
  if (map->epoch <= map_.epoch) return false;
  map_ = *std::move(map);
  return true;
}

void ShardRouter::SchedulePoll() {
  std::weak_ptr<ShardRouter> weak = weak_from_this();
  runtime_.timer().Schedule(absl::Now() + poll_, [weak] {
    auto self = weak.lock();
    if (!self) return;
    if (ThreadPool* pool = self->runtime_.live_executor()) {
      pool->Post([self] { self->Poll(); });
    } else {
      MutexLock lock(&self->mu_);
      self->polling_ = false;
    }
  });
}

void ShardRouter::Poll() {
  {
    MutexLock lock(&mu_);
    if (in_flight_.empty()) {
      polling_ = false;
      return;
    }
  }
  Refresh();
  std::vector<std::shared_ptr<Routed>> moved;
  {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, call] : in_flight_) {
      // A lost shard's call is sent once the shard is back, or fails at its deadline.
      if (map_.primary(call->shard) != call->server ||
          (call->server.empty() && now >= call->deadline)) {
        moved.push_back(call);
      }
    }
  }
  for (const auto& call : moved) Send(call);
  SchedulePoll();
}

}  // namespace tessera::ps
