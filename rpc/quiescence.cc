#include "rpc/quiescence.h"

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::rpc {
namespace {

constexpr absl::Duration kProbeEvery = absl::Seconds(1);
// Once every participant has arrived, agreement takes a few rounds; one
// that has not come for this long says why, and again as often. (Waiting
// for ranks to arrive is not reported: a parameter server rightly waits
// hours for its trainers, see Note [Shutdown liveness],
// rpc/shutdown_prober.h.)
constexpr absl::Duration kReportEvery = absl::Seconds(60);

// One worker probes, the others hear its verdict through the store: if
// every waiting worker probed, each would open a connection to each missing
// one (in a parameter-server job, every trainer to every other). The prober
// is the lowest rank that has arrived; all agree on it, as they read the
// same keys. The verdict is "<code>:<message>" under "<prefix>/dead".
absl::Status ProbeOrHear(store::StoreClient& store, const std::string& prefix, int rank,
                         const std::vector<int>& participants,
                         const std::vector<std::string>& missing_keys, const MissingProbe& probe) {
  std::vector<int> missing;
  for (const auto& key : missing_keys) {
    int missing_rank = -1;
    if (absl::SimpleAtoi(key.substr(key.rfind('/') + 1), &missing_rank)) {
      missing.push_back(missing_rank);
    }
  }
  // The lowest participant that has arrived.
  int prober = rank;
  for (int r : participants) {
    if (std::find(missing.begin(), missing.end(), r) == missing.end()) {
      prober = std::min(prober, r);
    }
  }
  const std::string verdict_key = prefix + "/dead";
  if (rank == prober) {
    absl::Status found = probe(missing);
    if (!found.ok()) {
      store.Set(verdict_key, absl::StrCat(static_cast<int>(found.code()), ":", found.message()))
          .IgnoreError();  // the prober reports it itself either way
    }
    return found;
  }
  auto verdict = store.Get(verdict_key, absl::ZeroDuration());
  if (!verdict.ok()) return absl::OkStatus();  // none yet
  int code = static_cast<int>(absl::StatusCode::kUnavailable);
  const size_t colon = verdict->find(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(verdict->substr(0, colon), &code)) {
    return absl::UnavailableError(*verdict);
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat(verdict->substr(colon + 1), " (found by rank ", prober, ")"));
}

std::string Encode(const AgentCounters& c) {
  return absl::StrCat(c.requests_sent, ",", c.responses_received, ",",
                      c.requests_received, ",", c.responses_sent);
}

bool Decode(const std::string& text, AgentCounters* c) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  return parts.size() == 4 && absl::SimpleAtoi(parts[0], &c->requests_sent) &&
         absl::SimpleAtoi(parts[1], &c->responses_received) &&
         absl::SimpleAtoi(parts[2], &c->requests_received) &&
         absl::SimpleAtoi(parts[3], &c->responses_sent);
}

// The round's keys of `ranks` not in `published`.
std::vector<std::string> Unpublished(const std::string& round_prefix, const std::vector<int>& ranks,
                                     const std::map<std::string, std::string>& published) {
  std::vector<std::string> keys;
  for (int r : ranks) {
    std::string key = round_prefix + std::to_string(r);
    if (published.count(key) == 0) keys.push_back(std::move(key));
  }
  return keys;
}

bool Balanced(const std::vector<AgentCounters>& all) {
  for (const auto& c : all) {
    if (c.requests_sent != c.responses_received ||
        c.requests_received != c.responses_sent) {
      return false;
    }
  }
  return true;
}

// What keeps `current` (of `members`) from agreeing: each rank's calls
// unanswered and requests in service, or, balanced, who moved since
// `previous` (still calling).
std::string Outstanding(const std::vector<int>& members, const std::vector<AgentCounters>& current,
                        const std::vector<AgentCounters>& previous) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < members.size(); ++i) {
    const AgentCounters& c = current[i];
    std::vector<std::string> what;
    if (c.requests_sent != c.responses_received) {
      what.push_back(absl::StrCat(c.requests_sent - c.responses_received, " of its ",
                                  c.requests_sent, " calls unanswered"));
    }
    if (c.requests_received != c.responses_sent) {
      what.push_back(absl::StrCat(c.requests_received - c.responses_sent, " of the ",
                                  c.requests_received, " requests it received in service"));
    }
    if (what.empty() && previous.size() == current.size() && !(c == previous[i])) {
      what.push_back(absl::StrCat("still calling (", c.requests_sent - previous[i].requests_sent,
                                  " calls sent, ",
                                  c.requests_received - previous[i].requests_received,
                                  " received since the round before)"));
    }
    if (!what.empty()) {
      parts.push_back(absl::StrCat("rank ", members[i], ": ", absl::StrJoin(what, ", ")));
    }
  }
  return parts.empty() ? "nothing outstanding" : absl::StrJoin(parts, "; ");
}

// The error when `missing` (keys of `round`) never joined it by the
// deadline. When the round before was complete but not agreed (calls in
// flight, or still being made), those calls kept the job from agreeing: the
// ranks missing from this round were only slower to start it, as on a loaded
// machine one always is, so they are not named. Otherwise they are the cause.
absl::Status MissedRound(int round, const std::vector<std::string>& missing,
                         const std::vector<int>& last_members,
                         const std::vector<AgentCounters>& last,
                         const std::vector<AgentCounters>& before_last) {
  if (!last.empty() && (!Balanced(last) || (!before_last.empty() && last != before_last))) {
    return absl::DeadlineExceededError(
        absl::StrCat("graceful shutdown: calls still outstanding after round ", round - 1, ": ",
                     Outstanding(last_members, last, before_last)));
  }
  std::vector<std::string> ranks;
  for (const auto& key : missing) ranks.push_back(key.substr(key.rfind('/') + 1));
  return absl::DeadlineExceededError(
      absl::StrCat("graceful shutdown: rank(s) ", absl::StrJoin(ranks, ", "),
                   " did not take part in round ", round, " (gone, or not shutting down)"));
}

}  // namespace

absl::Status AgreeQuiescent(store::StoreClient& store, const std::string& prefix, int rank,
                            const std::function<std::vector<int>()>& participants,
                            const RpcAgent& agent, absl::Time deadline, const MissingProbe& probe) {
  // The last two complete rounds, and who took part in the last.
  std::vector<AgentCounters> previous, before_previous;
  std::vector<int> previous_members;
  // Rounds back off so a long-running call does not hammer the store.
  absl::Duration pause = absl::Milliseconds(1);
  // Counted from the first round every participant took part in.
  absl::Time next_report = absl::InfiniteFuture();
  for (int round = 0;; ++round) {
    const std::string round_prefix = absl::StrCat(prefix, "/", round, "/");
    auto status = store.Set(round_prefix + std::to_string(rank), Encode(agent.counters()));
    if (!status.ok()) return status;
    // One read per round returns every participant's counters (a Get per
    // rank made a round cost the store N² calls for N workers).
    std::vector<int> members = participants();
    auto slice = [deadline] {
      return std::max(absl::ZeroDuration(), std::min(kProbeEvery, deadline - absl::Now()));
    };
    std::map<std::string, std::string> published;
    std::vector<std::string> missing = Unpublished(round_prefix, members, published);
    while (true) {
      TESSERA_ASSIGN_OR_RETURN(auto read, store.GetMany(missing, slice()));
      published.merge(read);
      missing = Unpublished(round_prefix, members, published);
      if (missing.empty()) break;
      // A rank that left meanwhile is no longer waited for.
      members = participants();
      missing = Unpublished(round_prefix, members, published);
      if (missing.empty() || absl::Now() >= deadline) break;
      if (probe != nullptr) {
        TESSERA_RETURN_IF_ERROR(ProbeOrHear(store, prefix, rank, members, missing, probe));
      }
    }
    if (!missing.empty()) {
      return MissedRound(round, missing, previous_members, previous, before_previous);
    }
    std::vector<AgentCounters> current;
    for (int member : members) {
      current.emplace_back();
      if (!Decode(published.at(round_prefix + std::to_string(member)), &current.back())) {
        return absl::DataLossError("graceful shutdown: malformed counters from rank " +
                                   std::to_string(member));
      }
    }
    if (Balanced(current) && current == previous) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("graceful shutdown: calls still outstanding after round ", round, ": ",
                       Outstanding(members, current, previous)));
    }
    if (next_report == absl::InfiniteFuture()) next_report = absl::Now() + kReportEvery;
    if (absl::Now() >= next_report) {
      next_report = absl::Now() + kReportEvery;
      // Said by the lowest participant: one line for the job, not one per
      // worker.
      if (!members.empty() && rank == *std::min_element(members.begin(), members.end())) {
        TESSERA_LOG(WARNING) << prefix << ": not yet agreed that nothing is in flight, round "
                             << round << ": " << Outstanding(members, current, previous);
      }
    }
    // Balanced but not yet confirmed: go again at once. Unbalanced: wait for
    // the in-flight calls to finish before the next snapshot.
    if (!Balanced(current)) {
      std::this_thread::sleep_for(absl::ToChronoMicroseconds(pause));
      pause = std::min(pause * 2, absl::Milliseconds(50));
    }
    before_previous = std::move(previous);
    previous = std::move(current);
    previous_members = members;
  }
}

}  // namespace tessera::rpc
