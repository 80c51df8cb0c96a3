// Membership: who a worker knows to be in the job, and what happened to
// them — the view elastic jobs are built on (see Note [Elastic membership],
// rpc/runtime.h).
//
//   rpc::Membership& members = worker->membership();
//   for (const auto& m : members.Members()) ...            // live, failed, left
//   uint64_t seen = 0;
//   for (const auto& e : members.WaitForEvents(seen, absl::Seconds(5))) {
//     seen = e.sequence;  // kJoined, kRejoined, kFailed, kLeft
//   }
//   members.Subscribe([](const rpc::MembershipEvent& e) { ... });
//
// A worker starts with the table of its rendezvous (ranks 0..world_size-1,
// all live). It changes when a peer's connection breaks (kFailed: a killed
// process, a cut link), when a new incarnation of a rank rejoins (kRejoined:
// same name and rank, new address; whatever the old incarnation held has
// been released first), when a worker joins beyond the initial ranks
// (kJoined) and when one leaves early on purpose (kLeft, Worker::Leave).
// Ranks are never reused by another name.
//
// Thread-safety: thread-safe. Subscribers run on the runtime's pool, one
// event at a time in sequence order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

enum class MemberState { kLive, kFailed, kLeft };

struct Member {
  WorkerInfo info;  // info.incarnation: 0 for the first process of a rank
  MemberState state = MemberState::kLive;
};

enum class MembershipEventKind { kJoined, kRejoined, kFailed, kLeft };
const char* MembershipEventName(MembershipEventKind kind);

struct MembershipEvent {
  uint64_t sequence = 0;  // 1, 2, ... in the order this worker saw them
  MembershipEventKind kind = MembershipEventKind::kJoined;
  std::string name;
  int rank = -1;
  int incarnation = 0;
  absl::Time at;
};

class Membership {
 public:
  using Listener = std::function<void(const MembershipEvent&)>;

  // --- for programs ---
  std::vector<Member> Members() const;
  // Names of the live members, by rank.
  std::vector<std::string> LiveNames() const;
  // Events with a sequence above `after`, oldest first.
  std::vector<MembershipEvent> EventsAfter(uint64_t after) const;
  // The same, waiting up to `timeout` for at least one; empty at the deadline.
  std::vector<MembershipEvent> WaitForEvents(uint64_t after, absl::Duration timeout) const;
  // Calls `listener` for every event from now on (on the runtime's pool).
  void Subscribe(Listener listener);

  // --- for the runtime ---
  std::optional<WorkerInfo> Find(int rank) const;
  std::optional<WorkerInfo> Find(const std::string& name) const;
  std::optional<int> RankOf(const std::string& name) const;
  // For every call's path: the name (and role) of `rank` without copying
  // the rest of its info; false (and unchanged) if there is no such rank.
  bool NameAndRole(int rank, std::string* name, std::string* role = nullptr) const;
  std::vector<WorkerInfo> Table() const;  // every rank's latest info, by rank
  size_t size() const;
  void Reset(std::vector<WorkerInfo> workers);  // the rendezvous table
  // A newer incarnation of a known rank, or a rank beyond the table. Returns
  // the event, or nullopt when `info` is not newer than what is known (a
  // repeated announcement) — callers then change nothing.
  std::optional<MembershipEvent> Admit(const WorkerInfo& info);
  // Returns the event if the member was live (a second notice is none).
  std::optional<MembershipEvent> MarkFailed(int rank);
  std::optional<MembershipEvent> MarkLeft(int rank);
  // Hands the events not yet delivered to the subscribers, in order (the
  // runtime posts it to its pool after each change; extra calls are no-ops).
  void DeliverPending();

 private:
  MembershipEvent RecordLocked(MembershipEventKind kind, const WorkerInfo& info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  mutable CondVar changed_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  std::vector<MembershipEvent> events_ ABSL_GUARDED_BY(mu_);
  std::vector<Listener> listeners_ ABSL_GUARDED_BY(mu_);
  Mutex deliver_mu_;  // guards the delivery's progress, never held while listeners run
  bool delivering_ ABSL_GUARDED_BY(deliver_mu_) = false;  // one delivery at a time, in order
  uint64_t delivered_ ABSL_GUARDED_BY(deliver_mu_) = 0;
};

}  // namespace tessera::rpc
