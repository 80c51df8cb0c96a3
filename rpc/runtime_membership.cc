// The runtime's side of elastic membership (see Note [Elastic membership],
// rpc/runtime.h): join and leave announcements, peer failures, and which
// ranks a graceful shutdown waits for.
#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/rendezvous.h"
#include "rpc/runtime.h"
#include "store/elastic_keys.h"

namespace tessera::rpc {
namespace {

// Only the rank travels: who it is and where it listens are read from the
// store, where its worker published them — so a peer can neither announce
// another address for some rank nor a rank the job never handed out.
struct JoinAnnouncement {
  static constexpr const char* kService = services::kJoin;
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  int64_t rank = -1;
  auto Fields() { return std::tie(rank); }
};

// The rank that leaves is the caller's proven one, not a field.
struct LeaveAnnouncement {
  static constexpr const char* kService = services::kLeave;
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  std::string reason;
  auto Fields() { return std::tie(reason); }
};

// How long a leaving worker waits to tell the others. A constant on
// purpose: it fails nothing (a peer not told learns from the store's left
// key), it only bounds the wait for a silent one.
constexpr absl::Duration kLeaveNoticeTimeout = absl::Seconds(10);

}  // namespace

absl::StatusOr<bool> Runtime::AdmitAnnounced(int64_t rank) {
  TESSERA_ASSIGN_OR_RETURN(
      auto ranks, RanksEverInJob(*store_client_, options_.store_prefix, options_.world_size));
  if (rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " announced a join, but the job has handed out ", ranks, " ranks"));
  }
  auto published = ReadWorker(*store_client_, options_.store_prefix, static_cast<int>(rank));
  if (!published.ok()) {
    return Annotate(published.status(), absl::StrCat("rank ", rank, " announced a join"));
  }
  const WorkerInfo& info = *published;
  MutexLock lock(&peer_changes_mu_);
  std::optional<MembershipEvent> event = membership_.Admit(info);
  if (!event.has_value()) return true;  // known already (announced twice)
  if (event->kind == MembershipEventKind::kRejoined) {
    // Nothing of the old incarnation may be taken for the new one's.
    ReleasePeer(info.rank);
    for (const auto& extension : extensions_) extension->OnPeerRejoined(info.rank);
  }
  agent_->SetWorkers(membership_.Table());
  TESSERA_LOG(INFO) << options_.name << ": '" << info.name << "' (rank " << info.rank << ") "
                    << MembershipEventName(event->kind) << " at " << info.address
                    << (info.incarnation > 0 ? absl::StrCat(", incarnation ", info.incarnation)
                                             : "");
  PostMembershipEvents();
  return true;
}

void Runtime::ServeMembership() {
  Serve<JoinAnnouncement>(
      internal_, [this](CallContext&, JoinAnnouncement m) { return AdmitAnnounced(m.rank); });
  Serve<LeaveAnnouncement>(internal_, [this](CallContext& ctx, LeaveAnnouncement m) {
    MutexLock lock(&peer_changes_mu_);
    if (membership_.MarkLeft(ctx.caller_rank).has_value()) {
      ReleasePeer(ctx.caller_rank);
      TESSERA_LOG(INFO) << options_.name << ": " << DescribeWorker(ctx.caller_rank)
                        << " left the job: " << m.reason;
      PostMembershipEvents();
    }
    return true;
  });
}

void Runtime::AnnounceJoin() {
  const std::string& prefix = options_.store_prefix;
  if (auto left = LeftRanks(*store_client_, prefix, static_cast<int>(membership_.size()));
      left.ok()) {
    for (int rank : *left) membership_.MarkLeft(rank);
  }
  const JoinAnnouncement message{self_.rank};
  struct Told {
    int rank;
    int incarnation;  // the one called: a newer may announce itself meanwhile
    Future<bool> answer;
  };
  std::vector<Told> calls;
  for (const Member& member : membership_.Members()) {
    const WorkerInfo& peer = member.info;
    if (peer.rank == self_.rank || peer.name.empty() || member.state == MemberState::kLeft) {
      continue;
    }
    // The job's rendezvous budget, not a constant: a peer slow to answer
    // on a loaded host would be marked failed (see Note [Slow is not failed],
    // store/store_backend.h).
    calls.push_back({peer.rank, peer.incarnation,
                     CallService(peer.rank, message, CallOptions{options_.rendezvous_timeout})});
  }
  for (Told& told : calls) {
    auto answer = AwaitCall(told.answer, options_.rendezvous_timeout);
    if (answer.ok()) continue;
    // Dead, or being restarted itself: its new incarnation will announce
    // itself to us — perhaps already has (see Note [Simultaneous rejoins]:
    // the table read at rendezvous may hold its old address), and that
    // one is not failed.
    TESSERA_LOG(INFO) << options_.name << ": could not tell " << DescribeWorker(told.rank)
                      << " that it joined: " << answer.status().message();
    MutexLock lock(&peer_changes_mu_);
    const std::optional<WorkerInfo> now = membership_.Find(told.rank);
    if (now.has_value() && now->incarnation == told.incarnation) membership_.MarkFailed(told.rank);
  }
  // The launcher's mark is spent: this incarnation is the restart.
  store_client_->Delete(store::elastic::RestartingKey(prefix, self_.rank)).IgnoreError();
}

void Runtime::ReleasePeer(int rank) {
  for (const auto& extension : extensions_) extension->OnPeerUnavailable(rank);
}

void Runtime::OnPeerFailure(int rank) {
  // On a transport thread: hand it to the pool, extensions may take locks.
  ThreadPool* const pool = this->pool();
  if (shutting_down_.load() || pool == nullptr) return;
  const std::optional<WorkerInfo> peer = membership_.Find(rank);
  if (!peer.has_value()) return;
  pool->Post([this, rank, incarnation = peer->incarnation] {
    if (shutting_down_.load()) return;
    MutexLock lock(&peer_changes_mu_);
    // A failure noticed after a newer incarnation rejoined is the old one's,
    // whose state the rejoin already released.
    const std::optional<WorkerInfo> now = membership_.Find(rank);
    if (!now.has_value() || now->incarnation != incarnation) return;
    // A peer that finished its graceful shutdown (it says so in the store
    // before it closes) left; it did not fail.
    const bool finished = store_client_
                              ->Get(absl::StrCat(options_.store_prefix, "/shutdown/done/", rank),
                                    absl::ZeroDuration())
                              .ok();
    if (finished) {
      membership_.MarkLeft(rank);
    } else {
      membership_.MarkFailed(rank);
    }
    ReleasePeer(rank);
    PostMembershipEvents();
  });
}

void Runtime::PostMembershipEvents() {
  if (ThreadPool* const pool = this->pool(); pool != nullptr) {
    pool->Post([this] { membership_.DeliverPending(); });
  }
}

std::vector<int> Runtime::ShutdownParticipants() {
  const std::string& prefix = options_.store_prefix;
  int ranks = static_cast<int>(membership_.size());
  if (auto ever = RanksEverInJob(*store_client_, prefix, options_.world_size); ever.ok()) {
    ranks = std::max(ranks, *ever);
  }
  std::vector<int> left;
  if (auto recorded = LeftRanks(*store_client_, prefix, ranks); recorded.ok()) {
    left = *std::move(recorded);
  }
  std::vector<int> participants;
  for (int rank = 0; rank < ranks; ++rank) {
    if (std::find(left.begin(), left.end(), rank) == left.end()) participants.push_back(rank);
  }
  return participants;
}

void Runtime::Leave(const std::string& reason) {
  ThrowIfError(
      store_client_->Set(store::elastic::LeftKey(options_.store_prefix, options_.rank), reason));
  std::vector<std::pair<int, Future<bool>>> calls;
  for (const Member& member : membership_.Members()) {
    if (member.info.rank == self_.rank || member.state != MemberState::kLive) continue;
    calls.emplace_back(member.info.rank, CallService(member.info.rank, LeaveAnnouncement{reason},
                                                     CallOptions{kLeaveNoticeTimeout}));
  }
  for (auto& [rank, call] : calls) {
    auto answer = AwaitCall(call, kLeaveNoticeTimeout);
    if (!answer.ok()) {
      TESSERA_LOG(INFO) << options_.name << ": could not tell " << DescribeWorker(rank)
                        << " that it leaves: " << answer.status().message();
    }
  }
  TryShutdown(/*graceful=*/false).IgnoreError();
}

}  // namespace tessera::rpc
