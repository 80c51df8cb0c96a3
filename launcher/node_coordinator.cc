#include "launcher/node_coordinator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status.h"

namespace tessera::launcher {
namespace {

constexpr char kPrefix[] = "tessera-run/";
constexpr char kClosed[] = "closed";
constexpr char kStopped[] = "stopped";

// A round's nodes as node 0 opens it: "0,1,3".
absl::StatusOr<std::vector<int>> ParseNodeList(const std::string& text) {
  std::vector<int> nodes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int node = -1;
    if (!absl::SimpleAtoi(part, &node) || node < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("node 0 opened the round with \"", text, "\", not a list of nodes"));
    }
    nodes.push_back(node);
  }
  return nodes;
}

}  // namespace

NodeCoordinator::NodeCoordinator(std::unique_ptr<store::StoreClient> store, ClearStore clear,
                                 int nnodes, int node_rank, int nproc_per_node,
                                 absl::Duration timeout, absl::Duration node_timeout,
                                 int min_nodes, LostNodePolicy policy)
    : store_(std::move(store)),
      clear_(std::move(clear)),
      nnodes_(nnodes),
      node_rank_(node_rank),
      nproc_per_node_(nproc_per_node),
      timeout_(timeout),
      node_timeout_(node_timeout),
      min_nodes_(min_nodes),
      policy_(std::move(policy)) {}

NodeCoordinator::~NodeCoordinator() { StopWatching(); }

std::string NodeCoordinator::Key(int round, const std::string& what) const {
  return absl::StrCat(kPrefix, round, "/", what);
}

absl::StatusOr<std::vector<int>> NodeCoordinator::Open(int round) {
  std::vector<int> nodes;
  if (node_rank_ == 0) {
    if (round > 0) {
      // A node that went silent instead of ending the last round is judged
      // as the watcher would have (see Note [Regrouping without lost nodes]).
      absl::Status all_ended =
          AwaitEnds(round - 1, timeout_, [&](int node, absl::Time heard) {
            const Verdict verdict = DeclareLost(round - 1, node, heard);
            return verdict.kind == Verdict::kStop ? absl::UnavailableError(verdict.what)
                                                  : absl::OkStatus();
          });
      if (!all_ended.ok()) {
        return absl::Status(all_ended.code(), absl::StrCat("not every node stopped its workers "
                                                           "of the last attempt: ",
                                                           all_ended.message()));
      }
      for (int node : LiveNodes()) {
        auto how = store_->Get(EndedKey(round - 1, node), timeout_);
        if (how.ok() && *how != kStopped) {
          return absl::FailedPreconditionError(
              absl::StrCat("node ", node, " ", *how, " in attempt ", round - 1,
                           ", so the group cannot be restarted without it"));
        }
      }
      clear_(kPrefix);
    }
    nodes = LiveNodes();
    TESSERA_RETURN_IF_ERROR(store_->Set(Key(round, "open"), absl::StrJoin(nodes, ",")));
  } else {
    auto open = store_->Get(Key(round, "open"), timeout_);
    if (!open.ok()) {
      return absl::Status(open.status().code(), absl::StrCat("node 0 did not start attempt ",
                                                             round, ": ", open.status().message()));
    }
    if (*open == kClosed) {
      return absl::AbortedError(absl::StrCat("node 0 will not start attempt ", round,
                                             " (its workers finished, or it gave up)"));
    }
    TESSERA_ASSIGN_OR_RETURN(auto listed, ParseNodeList(*open));
    if (std::find(listed.begin(), listed.end(), node_rank_) == listed.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node 0 restarted the group on nodes ", *open, " without this node (", node_rank_,
          "): it was declared lost (see Note [Regrouping without lost nodes])"));
    }
    nodes = std::move(listed);
  }
  MutexLock lock(&mu_);
  round_nodes_ = nodes;
  return nodes;
}

int NodeCoordinator::WatchFailures(int round) {
  StopWatching();
  if (pipe2(wake_, O_CLOEXEC) != 0) return -1;
  stop_watching_ = false;
  std::set<int> watched;  // the round's other nodes
  {
    MutexLock lock(&mu_);
    lost_.reset();
    regrouping_ = false;
    beats_.clear();
    for (int node : round_nodes_) {
      if (node != node_rank_) watched.insert(node);
    }
  }
  watcher_ = std::thread([this, round, watched]() mutable {
    const std::string failed = Key(round, "failed");
    auto wake = [this](std::optional<std::string> lost) {
      if (lost.has_value()) {
        MutexLock lock(&mu_);
        lost_ = std::move(lost);
      }
      [[maybe_unused]] ssize_t n = write(wake_[1], "!", 1);
    };
    // Note [Node heartbeats]: a node whose launcher is killed (or whose link
    // is cut) reports nothing, so failures alone would leave the others
    // waiting for ever. Each node beats once a round of this loop; node 0
    // declares a node silent for `node_timeout_` lost (see Note [Lost nodes]),
    // and a node that cannot reach the store for `timeout_` gives up on the
    // job.
    absl::Time last_contact = absl::Now();
    const std::string verdict = Key(round, absl::StrCat("lost/", node_rank_));
    for (int64_t beat = 1; !stop_watching_; ++beat) {
      // Short waits, so StopWatching is prompt; the store paces the loop.
      if (store_->Get(failed, absl::Seconds(1)).ok()) return wake(std::nullopt);
      const absl::Time now = absl::Now();
      if (store_->Set(AliveKey(round, node_rank_), absl::StrCat(beat)).ok()) {
        last_contact = now;
        // Back from a cut the others outlasted: its ranks were given up.
        if (auto declared = store_->Get(verdict, absl::ZeroDuration()); declared.ok()) {
          return wake(
              absl::StrCat("node 0 declared this node lost and the job went on without "
                           "it (",
                           *declared, "); stopping its workers"));
        }
      } else if (now - last_contact > timeout_) {
        return wake(absl::StrCat(
            "node ", node_rank_, " lost contact with the rendezvous store at ", store_->target(),
            " for ", absl::FormatDuration(timeout_), " (--rdzv_timeout): ",
            absl::StartsWith(store_->target(), "etcd://")
                ? "a majority of its members are down, or this node's link to them"
                : "node 0's launcher is gone or the link to it is down"));
      }
      if (node_rank_ != 0) continue;
      if (auto stop = JudgeSilentNodes(round, watched, now)) return wake(*std::move(stop));
    }
  });
  return wake_[0];
}

std::optional<std::string> NodeCoordinator::JudgeSilentNodes(int round, std::set<int>& watched,
                                                             absl::Time now) {
  for (auto node = watched.begin(); node != watched.end();) {
    const absl::Time heard = LastHeard(round, *node);
    if (now - heard <= node_timeout_) {
      ++node;
      continue;
    }
    // A node whose workers finished reports its end and its launcher
    // exits: silent, but not lost (its replicas may finish seconds
    // before this node's; judged lost, it failed a finished job).
    if (store_->Get(EndedKey(round, *node), absl::ZeroDuration()).ok()) {
      node = watched.erase(node);
      continue;
    }
    const Verdict lost = DeclareLost(round, *node, heard);
    if (lost.kind == Verdict::kStop) return lost.what;
    if (lost.kind == Verdict::kRegroup) {
      {
        MutexLock lock(&mu_);
        regrouping_ = true;
      }
      // Every node stops its workers; the next round opens without it.
      ReportFailure(round, lost.what);
      return lost.what;
    }
    node = watched.erase(node);
  }
  return std::nullopt;
}

void NodeCoordinator::StopWatching() {
  stop_watching_ = true;
  if (watcher_.joinable()) watcher_.join();
  for (int& fd : wake_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void NodeCoordinator::ReportFailure(int round, const std::string& what) {
  (void)store_->CompareSet(Key(round, "failed"), "", absl::StrCat("node ", node_rank_, ": ", what));
}

std::optional<std::string> NodeCoordinator::LostNode() const {
  MutexLock lock(&mu_);
  return lost_;
}

bool NodeCoordinator::Regrouping() const {
  MutexLock lock(&mu_);
  return regrouping_;
}

std::optional<std::string> NodeCoordinator::ReportedFailure(int round) {
  auto failed = store_->Get(Key(round, "failed"), absl::ZeroDuration());
  if (!failed.ok()) return std::nullopt;
  return *failed;
}

void NodeCoordinator::End(int round, Ending how) {
  const char* value = how == Ending::kStopped    ? kStopped
                      : how == Ending::kFinished ? "finished"
                                                 : "was interrupted";
  const std::string key = EndedKey(round, node_rank_);
  if (how != Ending::kStopped) {
    (void)store_->Set(key, value);
    return;
  }
  // A stopped node takes part in the next round: retried while the store
  // does not answer (up to --rdzv_timeout), so a node cut off from it still
  // says it stopped once the link heals, and node 0 does not judge it
  // silent and restart the group without it.
  const absl::Time deadline = absl::Now() + timeout_;
  while (!store_->Set(key, value, absl::Seconds(2)).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Seconds(1));  // a pause between tries, not a wait for an event
  }
}

absl::Status NodeCoordinator::AwaitEnds(
    int round, absl::Duration timeout,
    const std::function<absl::Status(int node, absl::Time heard)>& silent) {
  const absl::Time deadline = absl::Now() + timeout;
  std::set<int> skip;
  while (true) {
    auto missing = store_->WaitForKeys(
        EndedKeys(round, skip),
        std::max(absl::ZeroDuration(), std::min(absl::Seconds(1), deadline - absl::Now())));
    if (!missing.ok()) return missing.status();
    if (missing->empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("nodes still running after ",
                                                      absl::FormatDuration(timeout), ": ",
                                                      absl::StrJoin(*missing, ", ")));
    }
    for (int node = 1; node < nnodes_; ++node) {
      const std::string ended = EndedKey(round, node);
      if (std::find(missing->begin(), missing->end(), ended) == missing->end()) continue;
      const absl::Time heard = LastHeard(round, node);
      if (absl::Now() - heard > node_timeout_) {
        skip.insert(node);
        TESSERA_RETURN_IF_ERROR(silent(node, heard));
      }
    }
  }
}

absl::Status NodeCoordinator::AwaitAllEnded(int round, absl::Duration timeout) {
  // A node that dies now (or died unnoticed by the watcher, which stopped
  // with this node's workers) goes silent: after node_timeout it is not
  // waited for any more (see Note [Lost nodes]). The job is over either way, so
  // nothing is decided about it, only reported.
  std::vector<std::string> gone;  // what became of the silent nodes
  TESSERA_RETURN_IF_ERROR(AwaitEnds(round, timeout, [&](int node, absl::Time) {
    gone.push_back(absl::StrCat("node ", node, " went silent before reporting its end (",
                                absl::FormatDuration(node_timeout_),
                                ", --node_timeout); not waited for"));
    return absl::OkStatus();
  }));
  if (!gone.empty()) return absl::UnavailableError(absl::StrJoin(gone, "; "));
  return absl::OkStatus();
}

std::vector<int> NodeCoordinator::LiveNodes() const {
  MutexLock lock(&mu_);
  std::vector<int> nodes;
  for (int node = 0; node < nnodes_; ++node) {
    if (!lost_nodes_.count(node)) nodes.push_back(node);
  }
  return nodes;
}

std::string NodeCoordinator::EndedKey(int round, int node) const {
  return Key(round, absl::StrCat("ended/", node));
}

std::vector<std::string> NodeCoordinator::EndedKeys(int round, const std::set<int>& skip) const {
  MutexLock lock(&mu_);
  std::vector<std::string> keys;
  for (int node : round_nodes_) {
    if (!lost_nodes_.count(node) && !skip.count(node)) keys.push_back(EndedKey(round, node));
  }
  return keys;
}

std::string NodeCoordinator::AliveKey(int round, int node) const {
  return Key(round, absl::StrCat("alive/", node));
}

absl::Time NodeCoordinator::LastHeard(int round, int node) {
  const auto beat = store_->Get(AliveKey(round, node), absl::ZeroDuration());
  const absl::Time now = absl::Now();
  MutexLock lock(&mu_);
  auto [seen, first] = beats_.try_emplace(node, std::string(), now);
  auto& [value, at] = seen->second;
  if (beat.ok() && *beat != value) {
    value = *beat;
    at = now;
  }
  return at;
}

NodeCoordinator::Verdict NodeCoordinator::DeclareLost(int round, int node,
                                                      absl::Time last_heard) {
  int live = 0;
  int first_rank = node * nproc_per_node_;
  {
    MutexLock lock(&mu_);
    live = nnodes_ - static_cast<int>(lost_nodes_.size()) - 1;
    auto at = std::find(round_nodes_.begin(), round_nodes_.end(), node);
    if (at != round_nodes_.end()) {
      first_rank = static_cast<int>(at - round_nodes_.begin()) * nproc_per_node_;
    }
  }
  const std::string what =
      absl::StrCat("node ", node, " lost: not heard from for ", absl::FormatDuration(node_timeout_),
                   " (--node_timeout), last at ",
                   absl::FormatTime("%H:%M:%E3S", last_heard, absl::LocalTimeZone()),
                   "; its launcher is gone or its link is down");
  if (live < min_nodes_) {
    return {Verdict::kStop, absl::StrCat(what, "; ", live, " nodes left, fewer than the ",
                                         min_nodes_, " required (--nnodes MIN:MAX)")};
  }
  const std::optional<std::string> refused =
      policy_ ? policy_(node, first_rank, what) : std::optional<std::string>("no policy");
  // Recorded either way: the node is out of the job from now on, and tells
  // itself so if it comes back.
  (void)store_->Set(Key(round, absl::StrCat("lost/", node)), what);
  {
    MutexLock lock(&mu_);
    lost_nodes_.insert(node);
  }
  if (!refused.has_value()) return {Verdict::kGoOn, what};
  return {Verdict::kRegroup,
          absl::StrCat(what, "; the group restarts on the ", live, " nodes left (", *refused, ")")};
}

void NodeCoordinator::Close(int round) { (void)store_->Set(Key(round, "open"), kClosed); }

}  // namespace tessera::launcher
