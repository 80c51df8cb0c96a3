#include "launcher/node_coordinator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace tessera::launcher {
namespace {

constexpr char kPrefix[] = "tessera-run/";
constexpr char kClosed[] = "closed";
constexpr char kStopped[] = "stopped";

// When each node's heartbeat (a counter under tessera-run/r/alive/<node>)
// last changed, as node 0 reads them (Note [Node heartbeats]).
class Heartbeats {
 public:
  Heartbeats(int nnodes, absl::Time now) : seen_(nnodes, {"", now}) {}
  // `beat` is `node`'s counter as read at `now`: when the node was last heard.
  absl::Time LastHeard(int node, const absl::StatusOr<std::string>& beat, absl::Time now) {
    auto& [value, at] = seen_[node];
    if (beat.ok() && *beat != value) {
      value = *beat;
      at = now;
    }
    return at;
  }

 private:
  std::vector<std::pair<std::string, absl::Time>> seen_;
};

}  // namespace

NodeCoordinator::NodeCoordinator(std::unique_ptr<store::StoreClient> store, ClearStore clear,
                                 int nnodes, int node_rank, absl::Duration timeout,
                                 absl::Duration node_timeout, int min_nodes, LostNodePolicy policy)
    : store_(std::move(store)),
      clear_(std::move(clear)),
      nnodes_(nnodes),
      node_rank_(node_rank),
      timeout_(timeout),
      node_timeout_(node_timeout),
      min_nodes_(min_nodes),
      policy_(std::move(policy)) {}

NodeCoordinator::~NodeCoordinator() { StopWatching(); }

std::string NodeCoordinator::Key(int round, const std::string& what) const {
  return absl::StrCat(kPrefix, round, "/", what);
}

absl::Status NodeCoordinator::Open(int round) {
  if (node_rank_ == 0) {
    if (round > 0) {
      {
        MutexLock lock(&mu_);
        if (!lost_nodes_.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("node ", *lost_nodes_.begin(),
                           " was lost, and the group is not restarted "
                           "without it (Note [Lost nodes])"));
        }
      }
      const std::vector<std::string> ended = EndedKeys(round - 1);
      absl::Status all_ended = store_->Wait(ended, timeout_);
      if (!all_ended.ok()) {
        return absl::Status(all_ended.code(), absl::StrCat("not every node stopped its workers "
                                                           "of the last attempt: ",
                                                           all_ended.message()));
      }
      for (int node = 0; node < nnodes_; ++node) {
        auto how = store_->Get(ended[node], timeout_);
        if (how.ok() && *how != kStopped) {
          return absl::FailedPreconditionError(
              absl::StrCat("node ", node, " ", *how, " in attempt ", round - 1,
                           ", so the group cannot be restarted without it"));
        }
      }
      clear_(kPrefix);
    }
    return store_->Set(Key(round, "open"), "open");
  }
  auto open = store_->Get(Key(round, "open"), timeout_);
  if (!open.ok()) {
    return absl::Status(open.status().code(), absl::StrCat("node 0 did not start attempt ", round,
                                                           ": ", open.status().message()));
  }
  if (*open == kClosed) {
    return absl::AbortedError(absl::StrCat("node 0 will not start attempt ", round,
                                           " (its workers finished, or it gave up)"));
  }
  return absl::OkStatus();
}

int NodeCoordinator::WatchFailures(int round) {
  StopWatching();
  if (pipe2(wake_, O_CLOEXEC) != 0) return -1;
  stop_watching_ = false;
  {
    MutexLock lock(&mu_);
    lost_.reset();
  }
  watcher_ = std::thread([this, round] {
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
    // declares a node silent for `node_timeout_` lost (Note [Lost nodes]),
    // and a node that cannot reach the store for `timeout_` gives up on the
    // job.
    absl::Time last_contact = absl::Now();
    Heartbeats heartbeats(nnodes_, absl::Now());
    std::set<int> lost;  // this round's lost nodes, no longer watched
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
      for (int node = 1; node < nnodes_; ++node) {
        if (lost.count(node)) continue;
        const absl::Time heard = heartbeats.LastHeard(
            node, store_->Get(AliveKey(round, node), absl::ZeroDuration()), now);
        if (now - heard > node_timeout_) {
          if (auto stop = DeclareLost(round, node, heard)) return wake(*stop);
          lost.insert(node);
        }
      }
    }
  });
  return wake_[0];
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

std::optional<std::string> NodeCoordinator::ReportedFailure(int round) {
  auto failed = store_->Get(Key(round, "failed"), absl::ZeroDuration());
  if (!failed.ok()) return std::nullopt;
  return *failed;
}

void NodeCoordinator::End(int round, Ending how) {
  const char* value = how == Ending::kStopped    ? kStopped
                      : how == Ending::kFinished ? "finished"
                                                 : "was interrupted";
  (void)store_->Set(Key(round, absl::StrCat("ended/", node_rank_)), value);
}

absl::Status NodeCoordinator::AwaitAllEnded(int round, absl::Duration timeout) {
  // A node that dies now (or died unnoticed by the watcher, which stopped
  // with this node's workers) goes silent: after node_timeout it is not
  // waited for any more (Note [Lost nodes]). The job is over either way, so
  // nothing is decided about it, only reported.
  const absl::Time deadline = absl::Now() + timeout;
  Heartbeats heartbeats(nnodes_, absl::Now());
  std::set<int> silent;
  std::vector<std::string> gone;  // what became of the silent nodes
  while (true) {
    auto missing = store_->WaitForKeys(
        EndedKeys(round, silent),
        std::max(absl::ZeroDuration(), std::min(absl::Seconds(1), deadline - absl::Now())));
    if (!missing.ok()) return missing.status();
    if (missing->empty() && gone.empty()) return absl::OkStatus();
    if (missing->empty()) return absl::UnavailableError(absl::StrJoin(gone, "; "));
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("nodes still running after ",
                                                      absl::FormatDuration(timeout), ": ",
                                                      absl::StrJoin(*missing, ", ")));
    }
    for (int node = 1; node < nnodes_; ++node) {
      const std::string ended = Key(round, absl::StrCat("ended/", node));
      if (std::find(missing->begin(), missing->end(), ended) == missing->end()) continue;
      const absl::Time now = absl::Now();
      const absl::Time heard =
          heartbeats.LastHeard(node, store_->Get(AliveKey(round, node), absl::ZeroDuration()), now);
      if (now - heard > node_timeout_) {
        silent.insert(node);
        gone.push_back(absl::StrCat("node ", node, " went silent before reporting its end (",
                                    absl::FormatDuration(node_timeout_),
                                    ", --node_timeout); not waited for"));
      }
    }
  }
}

std::vector<std::string> NodeCoordinator::EndedKeys(int round, const std::set<int>& skip) const {
  MutexLock lock(&mu_);
  std::vector<std::string> keys;
  for (int node = 0; node < nnodes_; ++node) {
    if (!lost_nodes_.count(node) && !skip.count(node)) {
      keys.push_back(Key(round, absl::StrCat("ended/", node)));
    }
  }
  return keys;
}

std::string NodeCoordinator::AliveKey(int round, int node) const {
  return Key(round, absl::StrCat("alive/", node));
}

std::optional<std::string> NodeCoordinator::DeclareLost(int round, int node,
                                                        absl::Time last_heard) {
  int live = 0;
  {
    MutexLock lock(&mu_);
    live = nnodes_ - static_cast<int>(lost_nodes_.size()) - 1;
  }
  const std::string what =
      absl::StrCat("node ", node, " lost: not heard from for ", absl::FormatDuration(node_timeout_),
                   " (--node_timeout), last at ",
                   absl::FormatTime("%H:%M:%E3S", last_heard, absl::LocalTimeZone()),
                   "; its launcher is gone or its link is down");
  if (live < min_nodes_) {
    return absl::StrCat(what, "; ", live, " nodes left, fewer than the ", min_nodes_,
                        " required (--nnodes MIN:MAX)");
  }
  if (auto refused = policy_ ? policy_(node, what) : std::optional<std::string>("no policy")) {
    return absl::StrCat(what, "; the job cannot go on without it: ", *refused);
  }
  (void)store_->Set(Key(round, absl::StrCat("lost/", node)), what);
  MutexLock lock(&mu_);
  lost_nodes_.insert(node);
  return std::nullopt;
}

void NodeCoordinator::Close(int round) { (void)store_->Set(Key(round, "open"), kClosed); }

}  // namespace tessera::launcher
