#include "ddp/fault_tolerant/quorum.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::ddp {
namespace {

// A quorum's value in the store: "id step" per line.
std::string Encode(const std::vector<QuorumMember>& members) {
  std::vector<std::string> lines;
  for (const auto& m : members) lines.push_back(absl::StrCat(m.id, " ", m.step));
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<QuorumMember> DecodeMember(absl::string_view line) {
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  QuorumMember member;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &member.step)) {
    return absl::DataLossError(absl::StrCat("malformed quorum entry '", line, "'"));
  }
  member.id = parts[0];
  return member;
}

absl::StatusOr<std::vector<QuorumMember>> Decode(const std::string& value) {
  std::vector<QuorumMember> members;
  for (absl::string_view line : absl::StrSplit(value, '\n', absl::SkipEmpty())) {
    auto member = DecodeMember(line);
    if (!member.ok()) return member.status();
    members.push_back(*std::move(member));
  }
  return members;
}

std::vector<std::string> Ids(const std::vector<QuorumMember>& members) {
  std::vector<std::string> ids;
  for (const auto& m : members) ids.push_back(m.id);
  return ids;
}

}  // namespace

int QuorumOptions::RequiredReplicas() const {
  return min_replicas > 0 ? min_replicas : initial_replicas / 2 + 1;
}

int64_t QuorumRound::max_step() const {
  int64_t most = 0;
  for (const auto& m : members) most = std::max(most, m.step);
  return most;
}

Quorum::Quorum(store::StoreClient* store, std::string replica_id, QuorumOptions options)
    : store_(store), id_(std::move(replica_id)), options_(std::move(options)) {}

Quorum::~Quorum() {
  if (cleaner_.joinable()) cleaner_.join();
}

void Quorum::CleanUpBefore(int64_t before) {
  if (cleaner_.joinable()) cleaner_.join();  // the last batch (long done, as a rule)
  const int64_t from = cleaned_;
  cleaned_ = before;
  cleaner_ = std::thread([this, from, before] {
    for (int64_t r = from; r < before; ++r) {
      auto slots = store_->Add(Key(r, "arrivals"), 0);
      for (int64_t slot = 0; slots.ok() && slot < *slots; ++slot) {
        auto value = store_->Get(Key(r, absl::StrCat("slot/", slot)), absl::ZeroDuration());
        if (auto member = value.ok() ? DecodeMember(*value) : value.status(); member.ok()) {
          store_->Delete(Key(r, "vote/" + member->id)).IgnoreError();
        }
        store_->Delete(Key(r, absl::StrCat("slot/", slot))).IgnoreError();
      }
      store_->Delete(Key(r, "arrivals")).IgnoreError();
    }
  });
}

std::string Quorum::Key(int64_t round, const std::string& what) const {
  return absl::StrCat(options_.prefix, "/", round, "/", what);
}

absl::StatusOr<std::vector<QuorumMember>> Quorum::Arrivals(int64_t round, int64_t* slots) const {
  auto count = store_->Add(Key(round, "arrivals"), 0);
  if (!count.ok()) return count.status();
  *slots = *count;
  std::vector<QuorumMember> arrivals;
  for (int64_t slot = 0; slot < *count; ++slot) {
    // A slot is taken (Add) before it is filled, and a replica may die in
    // between: an empty slot is not an arrival (yet).
    auto value = store_->Get(Key(round, absl::StrCat("slot/", slot)), absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(value.status())) continue;
    if (!value.ok()) return value.status();
    auto member = DecodeMember(*value);
    if (!member.ok()) return member.status();
    arrivals.push_back(*std::move(member));
  }
  return arrivals;
}

absl::StatusOr<std::vector<QuorumMember>> Quorum::Closed(int64_t round, absl::Duration wait) const {
  auto value = store_->Get(Key(round, "quorum"), wait);
  if (!value.ok()) return value.status();
  return Decode(*value);
}

absl::StatusOr<std::vector<QuorumMember>> Quorum::AwaitArrivals(int64_t r) const {
  // Whom to wait for: the previous quorum (known if this replica was in it),
  // or the first round's replicas.
  std::vector<std::string> expected = previous_;
  size_t expected_count = expected.size();
  if (r == 0) {
    expected.clear();
    expected_count = static_cast<size_t>(options_.initial_replicas);
  } else if (previous_round_ != r - 1) {
    auto previous = Closed(r - 1, options_.round_timeout());
    expected = previous.ok() ? Ids(*previous) : std::vector<std::string>();
    expected_count =
        previous.ok() ? expected.size() : static_cast<size_t>(options_.initial_replicas);
  }
  // A replica that fell behind waits for those who hold the state
  // (Note [No split brain]); no round waits for fewer than can commit.
  if (!holders_.empty()) expected = holders_;
  expected_count =
      std::max({expected_count, expected.size(), static_cast<size_t>(options_.RequiredReplicas())});
  const absl::Time deadline = absl::Now() + options_.round_timeout();
  while (true) {
    int64_t slots = 0;
    auto arrivals = Arrivals(r, &slots);
    if (!arrivals.ok()) return arrivals.status();
    const std::vector<std::string> ids = Ids(*arrivals);
    const bool all_expected = std::all_of(
        expected.begin(), expected.end(),
        [&](const std::string& id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); });
    // Done when the expected are all here, at the deadline, or when someone
    // else closed the round (no need to wait on).
    if ((all_expected && arrivals->size() >= expected_count) || absl::Now() >= deadline ||
        Closed(r, absl::ZeroDuration()).ok()) {
      return arrivals;
    }
    // The next arrival's slot, or 50 ms, whichever comes first.
    auto missing = store_->WaitForKeys({Key(r, absl::StrCat("slot/", slots))},
                                       std::min(absl::Milliseconds(50), deadline - absl::Now()));
    if (!missing.ok()) return missing.status();
  }
}

absl::StatusOr<std::optional<QuorumRound>> Quorum::EnterRound(int64_t step, std::string* why) {
  if (next_round_ < 0) {
    // A replica entering a running job starts at the last round closed.
    auto hint = store_->Get(options_.prefix + "/last_closed", absl::ZeroDuration());
    next_round_ = 0;
    if (hint.ok() && !absl::SimpleAtoi(*hint, &next_round_)) {
      return absl::DataLossError("malformed quorum round hint '" + *hint + "'");
    }
  }
  // The round is used up whatever happens in it: a replica must never take
  // two arrival slots of one round.
  const int64_t r = next_round_++;
  if (Closed(r, absl::ZeroDuration()).ok()) return std::nullopt;  // closed before we came
  auto slot = store_->Add(Key(r, "arrivals"), 1);
  if (!slot.ok()) return slot.status();
  TESSERA_RETURN_IF_ERROR(
      store_->Set(Key(r, absl::StrCat("slot/", *slot - 1)), absl::StrCat(id_, " ", step)));
  auto arrived = AwaitArrivals(r);
  if (!arrived.ok()) return arrived.status();
  std::vector<QuorumMember> arrivals = *std::move(arrived);
  // By id, not arrival order: the same members make the same group, with
  // the same ranks, round after round (no group formed again for nothing).
  std::sort(arrivals.begin(), arrivals.end(),
            [](const QuorumMember& a, const QuorumMember& b) { return a.id < b.id; });
  auto closed = store_->CompareSet(Key(r, "quorum"), "", Encode(arrivals));
  if (!closed.ok()) return closed.status();
  auto members = Decode(*closed);
  if (!members.ok()) return members.status();
  const std::vector<std::string> ids = Ids(*members);
  const auto self = std::find(ids.begin(), ids.end(), id_);
  if (self == ids.end()) {
    *why = absl::StrCat("round ", r, " closed without it");
    return std::nullopt;
  }
  store_->Set(options_.prefix + "/last_closed", std::to_string(r)).IgnoreError();
  // Members of round r are done with round r - 2 (they voted in r - 1).
  if (self == ids.begin() && r >= 2 && r - 2 - cleaned_ >= kCleanupEvery) CleanUpBefore(r - 1);
  if (static_cast<int>(ids.size()) < options_.RequiredReplicas()) {
    // Every member sees the same list, so none of them votes: the round is
    // abandoned, and the next waits for more (Note [No split brain]).
    *why =
        absl::StrCat("round ", r, "'s quorum (", absl::StrJoin(ids, ", "), ") has fewer than the ",
                     options_.RequiredReplicas(), " replicas required to commit");
    TESSERA_LOG(WARNING) << "replica '" << id_ << "': " << *why << "; waiting for more";
    return std::nullopt;
  }
  QuorumRound round;
  round.round = r;
  round.members = *std::move(members);
  round.rank = static_cast<int>(self - ids.begin());
  round.changed = ids != previous_;
  previous_ = ids;
  previous_round_ = r;
  return round;
}

absl::StatusOr<QuorumRound> Quorum::Join(int64_t step) {
  const absl::Time give_up = absl::Now() + options_.rejoin_timeout;
  std::string why = "no round open";  // why no round has taken this replica yet
  bool store_lost = false;
  while (true) {
    auto entered = EnterRound(step, &why);
    if (entered.ok() && entered->has_value()) {
      if (store_lost) TESSERA_LOG(WARNING) << "replica '" << id_ << "' reached the store again";
      return **std::move(entered);
    }
    if (!entered.ok()) {
      const absl::Status& error = entered.status();
      // The store out of reach (a cut link, node 0 restarting) is waited
      // out; anything else is not going to change.
      if (!absl::IsUnavailable(error) && !absl::IsDeadlineExceeded(error)) return error;
      if (!store_lost) {
        TESSERA_LOG(WARNING) << "replica '" << id_ << "' cannot reach the store (" << error
                             << "); retrying for up to "
                             << absl::FormatDuration(give_up - absl::Now());
      }
      store_lost = true;
      why = std::string(error.message());
      absl::SleepFor(std::min(absl::Milliseconds(250), give_up - absl::Now()));
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("replica '", id_, "' found no quorum to join within ",
                       absl::FormatDuration(options_.rejoin_timeout), " (rejoin_timeout; store ",
                       store_->target(), ", round ", next_round_, "): ", why));
    }
  }
}

absl::StatusOr<std::string> Quorum::Decide(const QuorumRound& round, bool ok) {
  const std::string decision_key = Key(round.round, "commit");
  TESSERA_RETURN_IF_ERROR(store_->Set(Key(round.round, "vote/" + id_), ok ? "1" : "0"));
  std::vector<std::string> votes;
  for (const auto& m : round.members) votes.push_back(Key(round.round, "vote/" + m.id));
  const absl::Time deadline = absl::Now() + options_.round_timeout();
  std::string decision = ok ? "" : "abort";  // a no needs nobody else's vote
  while (decision.empty()) {
    auto missing = store_->WaitForKeys(
        votes,
        std::max(absl::ZeroDuration(), std::min(absl::Milliseconds(50), deadline - absl::Now())));
    if (!missing.ok()) return missing.status();
    bool any_no = false;
    for (const auto& key : votes) {
      if (std::find(missing->begin(), missing->end(), key) != missing->end()) continue;
      auto vote = store_->Get(key, absl::ZeroDuration());
      any_no = any_no || !vote.ok() || *vote != "1";
    }
    if (any_no || absl::Now() >= deadline) {
      decision = "abort";
    } else if (missing->empty()) {
      decision = "commit";
    } else if (store_->Get(decision_key, absl::ZeroDuration()).ok()) {
      break;  // decided by another member
    }
  }
  return store_->CompareSet(decision_key, "", decision.empty() ? "abort" : decision);
}

absl::StatusOr<bool> Quorum::Commit(const QuorumRound& round, bool ok) {
  // Safe to count as not committed (Note [No split brain]): if the others
  // did commit, this replica is behind at its next round and recovers.
  auto unknown = [&](const absl::Status& why) {
    TESSERA_LOG(WARNING) << "replica '" << id_ << "' cannot learn whether round " << round.round
                         << " committed (" << why << "); counting it as not committed";
    return false;
  };
  auto decision = Decide(round, ok);
  if (!decision.ok()) return unknown(decision.status());
  if (*decision != "commit") return false;
  // The claim: the first round to take the step is the only one that
  // commits it.
  auto winner = store_->CompareSet(absl::StrCat(options_.prefix, "/step/", round.max_step() + 1),
                                   "", std::to_string(round.round));
  if (!winner.ok()) return unknown(winner.status());
  int64_t owner = -1;
  if (!absl::SimpleAtoi(*winner, &owner)) {
    return absl::DataLossError(absl::StrCat("malformed step claim '", *winner, "' in the store"));
  }
  if (owner == round.round) {
    holders_.clear();
    behind_since_.reset();
    return true;
  }
  TESSERA_RETURN_IF_ERROR(FellBehind(round, owner));
  return false;
}

absl::Status Quorum::FellBehind(const QuorumRound& round, int64_t winner) {
  auto holders = Closed(winner, absl::ZeroDuration());
  if (holders.ok()) holders_ = Ids(*holders);
  const absl::Time now = absl::Now();
  if (!behind_since_.has_value()) behind_since_ = now;
  const std::string what =
      absl::StrCat("step ", round.max_step() + 1, " was committed by round ", winner, " (replicas ",
                   absl::StrJoin(holders_, ", "), "), not by this replica's quorum (round ",
                   round.round, ": ", absl::StrJoin(Ids(round.members), ", "), ")");
  if (now - *behind_since_ > options_.rejoin_timeout) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica '", id_, "': ", what, "; none of them has joined a quorum with this replica for ",
        absl::FormatDuration(options_.rejoin_timeout), " (rejoin_timeout)"));
  }
  TESSERA_LOG(WARNING) << "replica '" << id_ << "': " << what
                       << "; nothing committed, waiting for them to recover their state";
  return absl::OkStatus();
}

}  // namespace tessera::ddp
