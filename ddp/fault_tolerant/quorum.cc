#include "ddp/fault_tolerant/quorum.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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
    auto previous = Closed(r - 1, options_.timeout);
    expected = previous.ok() ? Ids(*previous) : std::vector<std::string>();
    expected_count =
        previous.ok() ? expected.size() : static_cast<size_t>(options_.initial_replicas);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    int64_t slots = 0;
    auto arrivals = Arrivals(r, &slots);
    if (!arrivals.ok()) return arrivals.status();
    const std::vector<std::string> ids = Ids(*arrivals);
    const bool all_expected =
        std::all_of(expected.begin(), expected.end(), [&](const std::string& id) {
          return std::find(ids.begin(), ids.end(), id) != ids.end();
        });
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

absl::StatusOr<QuorumRound> Quorum::Join(int64_t step) {
  if (next_round_ < 0) {
    // A replica entering a running job starts at the last round closed.
    auto hint = store_->Get(options_.prefix + "/last_closed", absl::ZeroDuration());
    next_round_ = 0;
    if (hint.ok() && !absl::SimpleAtoi(*hint, &next_round_)) {
      return absl::DataLossError("malformed quorum round hint '" + *hint + "'");
    }
  }
  // A replica that keeps arriving late (rounds closing without it) gives up.
  const absl::Time give_up = absl::Now() + 4 * options_.timeout;
  for (;; ++next_round_) {
    const int64_t r = next_round_;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("replica '", id_,
                                                      "' found no quorum to join by round ", r,
                                                      " (store ", store_->target(), ")"));
    }
    if (Closed(r, absl::ZeroDuration()).ok()) continue;  // closed before we came
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
    if (self == ids.end()) continue;  // closed without us: the next round
    store_->Set(options_.prefix + "/last_closed", std::to_string(r)).IgnoreError();
    QuorumRound round;
    round.round = r;
    round.members = *std::move(members);
    round.rank = static_cast<int>(self - ids.begin());
    round.changed = ids != previous_;
    previous_ = ids;
    previous_round_ = r;
    ++next_round_;
    // Members of round r are done with round r - 2 (they voted in r - 1).
    if (round.rank == 0 && r >= 2 && r - 2 - cleaned_ >= kCleanupEvery) CleanUpBefore(r - 1);
    if (static_cast<int>(round.members.size()) < options_.min_replicas) {
      return absl::FailedPreconditionError(
          absl::StrCat("quorum of round ", r, " has ", round.members.size(),
                       " replicas, fewer than the ", options_.min_replicas, " required"));
    }
    return round;
  }
}

absl::StatusOr<bool> Quorum::Commit(const QuorumRound& round, bool ok) {
  const std::string decision_key = Key(round.round, "commit");
  TESSERA_RETURN_IF_ERROR(store_->Set(Key(round.round, "vote/" + id_), ok ? "1" : "0"));
  std::vector<std::string> votes;
  for (const auto& m : round.members) votes.push_back(Key(round.round, "vote/" + m.id));
  const absl::Time deadline = absl::Now() + options_.timeout;
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
  auto decided = store_->CompareSet(decision_key, "", decision.empty() ? "abort" : decision);
  if (!decided.ok()) return decided.status();
  return *decided == "commit";
}

}  // namespace tessera::ddp
