#include "rpc/membership.h"

#include "absl/strings/str_cat.h"
#include "common/trace.h"

namespace tessera::rpc {

const char* MembershipEventName(MembershipEventKind kind) {
  switch (kind) {
    case MembershipEventKind::kJoined:
      return "joined";
    case MembershipEventKind::kRejoined:
      return "rejoined";
    case MembershipEventKind::kFailed:
      return "failed";
    case MembershipEventKind::kLeft:
      return "left";
  }
  return "?";
}

std::vector<Member> Membership::Members() const {
  MutexLock lock(&mu_);
  return members_;
}

std::vector<std::string> Membership::LiveNames() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& member : members_) {
    if (member.state == MemberState::kLive) names.push_back(member.info.name);
  }
  return names;
}

std::vector<MembershipEvent> Membership::EventsAfter(uint64_t after) const {
  MutexLock lock(&mu_);
  // Sequences are 1, 2, ...: event n is at index n - 1.
  if (after >= events_.size()) return {};
  return std::vector<MembershipEvent>(events_.begin() + static_cast<std::ptrdiff_t>(after),
                                      events_.end());
}

std::vector<MembershipEvent> Membership::WaitForEvents(uint64_t after,
                                                       absl::Duration timeout) const {
  {
    MutexLock lock(&mu_);
    changed_.WaitUntil(
        &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return events_.size() > after; },
        absl::Now() + timeout);
  }
  return EventsAfter(after);
}

void Membership::Subscribe(Listener listener) {
  MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

std::optional<WorkerInfo> Membership::Find(int rank) const {
  MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(members_.size())) return std::nullopt;
  return members_[rank].info;
}

std::optional<WorkerInfo> Membership::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  for (const auto& member : members_) {
    if (member.info.name == name) return member.info;
  }
  return std::nullopt;
}

std::optional<int> Membership::RankOf(const std::string& name) const {
  MutexLock lock(&mu_);
  for (const auto& member : members_) {
    if (member.info.name == name) return member.info.rank;
  }
  return std::nullopt;
}

bool Membership::NameAndRole(int rank, std::string* name, std::string* role) const {
  MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(members_.size())) return false;
  *name = members_[rank].info.name;
  if (role != nullptr) *role = members_[rank].info.role;
  return true;
}

std::vector<WorkerInfo> Membership::Table() const {
  MutexLock lock(&mu_);
  std::vector<WorkerInfo> table;
  table.reserve(members_.size());
  for (const auto& member : members_) table.push_back(member.info);
  return table;
}

size_t Membership::size() const {
  MutexLock lock(&mu_);
  return members_.size();
}

void Membership::Reset(std::vector<WorkerInfo> workers) {
  MutexLock lock(&mu_);
  members_.clear();
  for (auto& info : workers) members_.push_back(Member{std::move(info), MemberState::kLive});
  changed_.SignalAll();
}

MembershipEvent Membership::RecordLocked(MembershipEventKind kind, const WorkerInfo& info) {
  MembershipEvent event{events_.size() + 1, kind,       info.name, info.rank,
                        info.incarnation,   absl::Now()};
  events_.push_back(event);
  changed_.SignalAll();
  if (trace::Enabled()) {
    trace::Instant(trace::Track::kMembership, "membership",
                   absl::StrCat(MembershipEventName(kind), " ", info.name),
                   {{"rank", absl::StrCat(info.rank)},
                    {"incarnation", absl::StrCat(info.incarnation)}});
  }
  return event;
}

std::optional<MembershipEvent> Membership::Admit(const WorkerInfo& info) {
  MutexLock lock(&mu_);
  if (info.rank < 0) return std::nullopt;
  if (info.rank >= static_cast<int>(members_.size())) {
    // Ranks are handed out in order, but announcements may arrive out of
    // it: a gap stays a placeholder (failed, nameless) until its worker's
    // own announcement comes.
    while (static_cast<int>(members_.size()) < info.rank) {
      WorkerInfo placeholder;
      placeholder.rank = static_cast<int>(members_.size());
      placeholder.incarnation = -1;
      members_.push_back(Member{placeholder, MemberState::kFailed});
    }
    members_.push_back(Member{info, MemberState::kLive});
    return RecordLocked(MembershipEventKind::kJoined, info);
  }
  Member& member = members_[info.rank];
  if (info.incarnation <= member.info.incarnation) return std::nullopt;
  const bool placeholder = member.info.incarnation < 0;
  member.info = info;
  member.state = MemberState::kLive;
  return RecordLocked(placeholder ? MembershipEventKind::kJoined : MembershipEventKind::kRejoined,
                      info);
}

std::optional<MembershipEvent> Membership::MarkFailed(int rank) {
  MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(members_.size())) return std::nullopt;
  Member& member = members_[rank];
  if (member.state != MemberState::kLive) return std::nullopt;
  member.state = MemberState::kFailed;
  return RecordLocked(MembershipEventKind::kFailed, member.info);
}

std::optional<MembershipEvent> Membership::MarkLeft(int rank) {
  MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(members_.size())) return std::nullopt;
  Member& member = members_[rank];
  if (member.state == MemberState::kLeft) return std::nullopt;
  member.state = MemberState::kLeft;
  return RecordLocked(MembershipEventKind::kLeft, member.info);
}

void Membership::DeliverPending() {
  uint64_t after = 0;
  {
    // One thread delivers at a time, in sequence order. A call meanwhile
    // (another pool thread, or a listener's own change) leaves its events to
    // that thread's next round instead of waiting on the listeners, which
    // run with no lock held.
    MutexLock lock(&deliver_mu_);
    if (delivering_) return;
    delivering_ = true;
    after = delivered_;
  }
  while (true) {
    std::vector<MembershipEvent> events = EventsAfter(after);
    if (events.empty()) {
      MutexLock lock(&deliver_mu_);
      // An event recorded since was left to us by its DeliverPending.
      if (!EventsAfter(after).empty()) continue;
      delivering_ = false;
      return;
    }
    std::vector<Listener> listeners;
    {
      MutexLock lock(&mu_);
      listeners = listeners_;
    }
    for (const auto& event : events) {
      for (const auto& listener : listeners) listener(event);
    }
    after = events.back().sequence;
    MutexLock lock(&deliver_mu_);
    delivered_ = after;
  }
}

}  // namespace tessera::rpc
