#include "ddp/fault_tolerant/quorum.h"

#include <algorithm>
#include <map>

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
    TESSERA_ASSIGN_OR_RETURN(auto member, DecodeMember(line));
    members.push_back(std::move(member));
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
      if (auto members = Closed(r, absl::ZeroDuration()); members.ok()) {
        for (const auto& m : *members) store_->Delete(ArrivalKey(r, m.id)).IgnoreError();
      }
      auto slots = store_->Add(Key(r, "newcomers"), 0);
      for (int64_t slot = 0; slots.ok() && slot < *slots; ++slot) {
        const std::string key = Key(r, absl::StrCat("newcomer/", slot));
        auto value = store_->Get(key, absl::ZeroDuration());
        if (auto member = value.ok() ? DecodeMember(*value) : value.status(); member.ok()) {
          store_->Delete(ArrivalKey(r, member->id)).IgnoreError();
        }
        store_->Delete(key).IgnoreError();
      }
      store_->Delete(Key(r, "newcomers")).IgnoreError();
    }
  });
}

std::string Quorum::Key(int64_t round, const std::string& what) const {
  return absl::StrCat(options_.prefix, "/", round, "/", what);
}

std::string Quorum::ArrivalKey(int64_t round, const std::string& id) const {
  return Key(round, "arrive/" + id);
}

absl::StatusOr<std::vector<QuorumMember>> Quorum::Closed(int64_t round, absl::Duration wait) const {
  TESSERA_ASSIGN_OR_RETURN(auto value, store_->Get(Key(round, "quorum"), wait));
  return Decode(value);
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
    // After a miss this replica may be rounds ahead of the others: each
    // round between closes within a round timeout of the one before.
    auto previous = Closed(r - 1, options_.round_timeout() * ahead_);
    expected = previous.ok() ? Ids(*previous) : std::vector<std::string>();
    expected_count =
        previous.ok() ? expected.size() : static_cast<size_t>(options_.initial_replicas);
  }
  // A replica that fell behind waits for those who hold the state
  // (see Note [No split brain]), and reads the previous quorum's arrivals
  // without waiting; any other replica announces itself in a newcomer slot.
  // No round waits for fewer than can commit.
  std::vector<std::string> others;
  if (!holders_.empty()) {
    others = expected;
    expected = holders_;
  }
  expected_count =
      std::max({expected_count, expected.size(), static_cast<size_t>(options_.RequiredReplicas())});
  const absl::Time deadline = absl::Now() + options_.round_timeout();
  Arrivals arrived;
  std::vector<bool> slots_read;  // newcomer slots already read
  for (bool first = true;; first = false) {
    // The first read waits for every expected replica at once (on the
    // steady path, the round's only wait); later ones poll, so that
    // newcomers and a close by another member are seen.
    const absl::Duration wait = std::max(
        absl::ZeroDuration(),
        first ? deadline - absl::Now() : std::min(absl::Milliseconds(50), deadline - absl::Now()));
    TESSERA_RETURN_IF_ERROR(ReadArrivals(r, expected, wait, &arrived));
    TESSERA_RETURN_IF_ERROR(ReadArrivals(r, others, absl::ZeroDuration(), &arrived));
    TESSERA_RETURN_IF_ERROR(ReadNewcomers(r, &slots_read, &arrived));
    const bool all_expected = std::all_of(expected.begin(), expected.end(),
                                          [&](const auto& id) { return arrived.count(id) > 0; });
    // Done when the expected are all here, at the deadline, or when someone
    // else closed the round (no need to wait on).
    if ((all_expected && arrived.size() >= expected_count) || absl::Now() >= deadline ||
        Closed(r, absl::ZeroDuration()).ok()) {
      std::vector<QuorumMember> arrivals;
      for (const auto& [id, step] : arrived) arrivals.push_back({id, step});
      return arrivals;
    }
    if (all_expected) {
      // Waiting for newcomers alone: the next slot, or 50 ms.
      auto missing = store_->WaitForKeys({Key(r, absl::StrCat("newcomer/", slots_read.size()))},
                                         std::min(absl::Milliseconds(50), deadline - absl::Now()));
      if (!missing.ok()) return missing.status();
    }
  }
}

absl::Status Quorum::ReadArrivals(int64_t r, const std::vector<std::string>& ids,
                                  absl::Duration wait, Arrivals* arrived) const {
  std::vector<std::string> keys;
  for (const auto& id : ids) {
    if (arrived->count(id) == 0) keys.push_back(ArrivalKey(r, id));
  }
  if (keys.empty()) return absl::OkStatus();
  TESSERA_ASSIGN_OR_RETURN(auto values, store_->GetMany(keys, wait));
  for (const auto& [key, value] : values) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(value, &step)) {
      return absl::DataLossError(absl::StrCat("malformed arrival '", value, "' at ", key));
    }
    (*arrived)[key.substr(ArrivalKey(r, "").size())] = step;
  }
  return absl::OkStatus();
}

absl::Status Quorum::ReadNewcomers(int64_t r, std::vector<bool>* slots_read,
                                   Arrivals* arrived) const {
  TESSERA_ASSIGN_OR_RETURN(auto slots, store_->Add(Key(r, "newcomers"), 0));
  slots_read->resize(static_cast<size_t>(slots), false);
  std::vector<std::string> unread;
  for (size_t slot = 0; slot < slots_read->size(); ++slot) {
    if (!(*slots_read)[slot]) unread.push_back(Key(r, absl::StrCat("newcomer/", slot)));
  }
  if (unread.empty()) return absl::OkStatus();
  // A slot is taken (Add) before it is filled, and a replica may die in
  // between: an empty slot is not an arrival (yet).
  TESSERA_ASSIGN_OR_RETURN(auto values, store_->GetMany(unread, absl::ZeroDuration()));
  for (const auto& [key, value] : values) {
    TESSERA_ASSIGN_OR_RETURN(auto member, DecodeMember(value));
    (*arrived)[member.id] = member.step;
    (*slots_read)[std::stoul(key.substr(Key(r, "newcomer/").size()))] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<QuorumRound>> Quorum::EnterRound(int64_t step, std::string* why) {
  if (next_round_ < 0) {
    // A replica entering a running job starts at the last round closed.
    TESSERA_ASSIGN_OR_RETURN(const int64_t last, LastClosed());
    next_round_ = std::max<int64_t>(last, 0);
  }
  const int64_t r = next_round_;
  // A member of the previous quorum is known to every member of this one;
  // any other replica announces itself, unless it comes too late.
  const bool known = r > 0 && previous_round_ == r - 1;
  // A newcomer uses the round up whatever happens in it: it must never take
  // two newcomer slots of one round. A known member whose store call failed
  // (Unavailable while an etcd member's calls fail over) tries the same
  // round again, still known: its arrival is one key set to the same value
  // again, and the close a compare-and-set that answers the value that won.
  // Had it gone on to the next round, it would have lost its place in the
  // group; failing again and again, it ran rounds ahead of the others and
  // waited alone where none of them came (see Note [Quorum per step]).
  if (!known) next_round_ = r + 1;
  if (!known && Closed(r, absl::ZeroDuration()).ok()) {
    *why = absl::StrCat("round ", r, " had closed before it arrived");
    Missed(r);
    return std::nullopt;
  }
  TESSERA_RETURN_IF_ERROR(store_->Set(ArrivalKey(r, id_), std::to_string(step)));
  if (!known) {
    TESSERA_ASSIGN_OR_RETURN(auto slot, store_->Add(Key(r, "newcomers"), 1));
    TESSERA_RETURN_IF_ERROR(
        store_->Set(Key(r, absl::StrCat("newcomer/", slot - 1)), absl::StrCat(id_, " ", step)));
  }
  TESSERA_ASSIGN_OR_RETURN(auto arrived, AwaitArrivals(r));
  // By id (AwaitArrivals' order), not arrival order: the same members make
  // the same group, with the same ranks, round after round (no group formed
  // again for nothing).
  TESSERA_ASSIGN_OR_RETURN(auto closed, store_->CompareSet(Key(r, "quorum"), "", Encode(arrived)));
  next_round_ = r + 1;  // closed: whatever its members, this replica's next round is the next
  auto members = Decode(closed);
  if (!members.ok()) return members.status();
  const std::vector<std::string> ids = Ids(*members);
  const auto self = std::find(ids.begin(), ids.end(), id_);
  if (self == ids.end()) {
    *why = absl::StrCat("round ", r, " closed without it");
    Missed(r);
    return std::nullopt;
  }
  lookahead_ = ahead_ = 1;
  if (self == ids.begin()) {
    // The hint for replicas entering later: one member writes it.
    store_->Set(options_.prefix + "/last_closed", std::to_string(r)).IgnoreError();
    // Members of round r are done with round r - 2.
    if (r >= 2 && r - 2 - cleaned_ >= kCleanupEvery) CleanUpBefore(r - 1);
  }
  if (static_cast<int>(ids.size()) < options_.RequiredReplicas()) {
    // Every member sees the same list, so none of them claims: the round is
    // abandoned, and the next waits for more (see Note [No split brain]).
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

absl::StatusOr<int64_t> Quorum::LastClosed() const {
  auto hint = store_->Get(options_.prefix + "/last_closed", absl::ZeroDuration());
  int64_t last = -1;
  if (hint.ok() && !absl::SimpleAtoi(*hint, &last)) {
    return absl::DataLossError("malformed quorum round hint '" + *hint + "'");
  }
  return last;
}

void Quorum::Missed(int64_t r) {
  // From the last round the others closed, when it is further on: by the
  // time a replica learns it missed round r, they may be rounds past it.
  const absl::StatusOr<int64_t> last = LastClosed();
  next_round_ = std::max(r, last.ok() ? *last : r) + lookahead_;
  ahead_ = lookahead_;
  lookahead_ = std::min(2 * lookahead_, kMaxLookahead);
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

absl::StatusOr<bool> Quorum::Commit(const QuorumRound& round, bool ok) {
  // Its collective failed: it commits nothing, and at its next round it is
  // behind whoever did (see Note [No split brain]).
  if (!ok) return false;
  // Safe to count as not committed, for the same reason.
  auto unknown = [&](const absl::Status& why) {
    TESSERA_LOG(WARNING) << "replica '" << id_ << "' cannot learn whether round " << round.round
                         << " committed (" << why << "); counting it as not committed";
    return false;
  };
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
