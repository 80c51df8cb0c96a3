#include "launcher/local_workers.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "launcher/malloc_settings.h"
#include "store/rendezvous_env.h"

namespace tessera::launcher {
namespace {

// Passes a worker's output on to stdout a line at a time, each line
// prefixed "[rank N] "; `flush` ends a last line without a newline.
void Emit(Worker& worker, const char* data, size_t size, bool flush) {
  worker.partial.append(data, size);
  size_t start = 0;
  for (size_t nl; (nl = worker.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line =
        absl::StrCat("[rank ", worker.rank, "] ", worker.partial.substr(start, nl - start + 1));
    [[maybe_unused]] ssize_t n = ::write(1, line.data(), line.size());
  }
  worker.partial.erase(0, start);
  if (flush && !worker.partial.empty()) {
    std::string line = absl::StrCat("[rank ", worker.rank, "] ", worker.partial, "\n");
    [[maybe_unused]] ssize_t n = ::write(1, line.data(), line.size());
    worker.partial.clear();
  }
}

// A rank to restart alone once the store takes its restarting mark.
struct PendingRestart {
  Worker failed;
  absl::Time failed_at;
  absl::Time next_try;
  absl::Duration backoff;
};

// Each try to mark a rank restarting gives the store this long; a store out
// of reach (a cut link) is tried again after a backoff of up to kMaxBackoff,
// for --rdzv_timeout in all (see Note [Restarting a rank alone]).
constexpr absl::Duration kMarkTimeout = absl::Seconds(2);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

// Supervise's state and steps.
class Supervisor {
 public:
  Supervisor(std::vector<Worker>& workers, int signal_fd, int failure_fd, absl::Duration grace,
             ElasticRestarts* elastic, const Respawn& respawn, absl::Duration restart_timeout)
      : workers_(workers),
        signal_fd_(signal_fd),
        failure_fd_(failure_fd),
        grace_(grace),
        elastic_(elastic),
        respawn_(respawn),
        restart_timeout_(restart_timeout) {}

  Outcome Run() {
    for (auto& w : workers_) {
      if (w.exit.has_value()) Exited(w);  // could not be started
    }
    while (true) {
      RestartPending();
      AdoptRestarted();
      std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0},
                                 {outcome_.failed_elsewhere ? -1 : failure_fd_, POLLIN, 0}};
      bool running = !pending_.empty();
      for (auto& w : workers_) {
        if (!w.exit.has_value() || w.output_fd >= 0) running = true;
        if (w.output_fd >= 0) fds.push_back({w.output_fd, POLLIN, 0});
      }
      if (!running) return Finished();
      if (kill_at_.has_value() && absl::Now() >= *kill_at_) {
        for (auto& w : workers_) {
          if (!w.exit.has_value()) ::kill(w.pid, SIGKILL);
        }
      }
      if (poll(fds.data(), fds.size(), PollTimeoutMs()) < 0 && errno != EINTR) return outcome_;
      if (fds[1].revents & POLLIN) {
        outcome_.failed_elsewhere = true;
        Say("another node failed, or this node is out of the job (why below); stopping this "
            "node's workers");
        StopAll(SIGTERM);
      }
      if (fds[0].revents & POLLIN) {
        ForwardSignals();
        ReapExited();
      }
      ForwardOutput(fds);
    }
  }

 private:
  bool Stopping() const {
    return outcome_.failed_rank.has_value() || outcome_.interrupted_by != 0 ||
           outcome_.failed_elsewhere;
  }

  void StopAll(int signal) {
    for (auto& w : workers_) {
      if (!w.exit.has_value()) ::kill(w.pid, signal);
    }
    if (!kill_at_.has_value()) kill_at_ = absl::Now() + grace_;
  }

  // The first worker to fail (of this node, before any interruption) stops
  // the others, unless its rank restarts alone or is let go.
  void Exited(const Worker& w) {
    if (*w.exit == 0) outcome_.any_succeeded = true;
    if (*w.exit == 0 || Stopping()) return;
    std::string why;  // why the group stops, when a rank could restart alone
    if (elastic_ != nullptr) {
      const auto decision = elastic_->OnFailure(w.rank, *w.exit, &why);
      if (decision != ElasticRestarts::Decision::kRestartGroup) {
        Say(absl::StrCat("rank ", w.rank, " failed with exit code ", *w.exit, ": ", why));
        if (decision == ElasticRestarts::Decision::kRestartAlone) {
          const absl::Time now = absl::Now();
          pending_.push_back({w, now, now, absl::Milliseconds(500)});
        } else {
          outcome_.given_up.push_back(w.rank);
        }
        return;  // dealt with alone: the group goes on (see Note [Restarting a rank alone])
      }
      why = " (" + why + ")";
    }
    outcome_.failed_rank = w.rank;
    outcome_.failed_code = *w.exit;
    Say(absl::StrCat("rank ", w.rank, " failed with exit code ", *w.exit, why,
                     "; stopping the other workers"));
    StopAll(SIGTERM);
  }

  // Restarts the pending ranks whose mark the store takes; gives up (the
  // group stops) on one the store has not answered for restart_timeout_.
  // None restarts once the group is stopping.
  void RestartPending() {
    if (Stopping()) {
      pending_.clear();
      return;
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      const absl::Time now = absl::Now();
      if (now < it->next_try) {
        ++it;
        continue;
      }
      const int rank = it->failed.rank;
      const absl::Status marked = elastic_->MarkRestarting(rank, *it->failed.exit, kMarkTimeout);
      if (marked.ok()) {
        if (it->next_try > it->failed_at) {
          Say(absl::StrCat("the store answers again after ",
                           absl::FormatDuration(absl::Trunc(now - it->failed_at, absl::Seconds(1))),
                           ": restarting rank ", rank, " alone"));
        }
        restarted_.push_back(respawn_(it->failed));
        it = pending_.erase(it);
        continue;
      }
      if (now - it->failed_at >= restart_timeout_) {
        outcome_.failed_rank = rank;
        outcome_.failed_code = *it->failed.exit;
        Say(absl::StrCat("rank ", rank, " cannot restart alone: the store did not answer for ",
                         absl::FormatDuration(restart_timeout_),
                         " (--rdzv_timeout): ", marked.message(), "; stopping the other workers"));
        StopAll(SIGTERM);
        it = pending_.erase(it);
        continue;
      }
      if (it->next_try == it->failed_at) {
        Say(absl::StrCat("cannot reach the store to restart rank ", rank, " alone (",
                         marked.message(), "); retrying until it answers, up to --rdzv_timeout"));
      }
      it->next_try = now + it->backoff;
      it->backoff = std::min(2 * it->backoff, kMaxBackoff);
      ++it;
    }
  }

  // Workers restarted alone join the supervised ones.
  void AdoptRestarted() {
    std::vector<Worker> fresh = std::move(restarted_);
    restarted_.clear();
    for (auto& w : fresh) {
      workers_.push_back(std::move(w));
      if (workers_.back().exit.has_value()) Exited(workers_.back());  // could not be started
    }
  }

  // Every worker exited and its output is drained.
  Outcome Finished() {
    // Every worker let go, none done: the node's part failed after all.
    if (!outcome_.given_up.empty() && !outcome_.any_succeeded &&
        !outcome_.failed_rank.has_value()) {
      outcome_.failed_rank = outcome_.given_up.front();
      outcome_.failed_code = 1;
      Say("every worker of this node failed and was given up on");
    }
    return outcome_;
  }

  // The timeout only matters while stopping workers (to escalate) or
  // retrying a restart; the pipes and the signalfd (SIGCHLD included) wake
  // the loop otherwise.
  int PollTimeoutMs() const {
    int timeout_ms = kill_at_.has_value() ? 100 : -1;
    for (const PendingRestart& restart : pending_) {
      const int until = static_cast<int>(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(restart.next_try - absl::Now())));
      timeout_ms = timeout_ms < 0 ? until : std::min(timeout_ms, until);
    }
    return timeout_ms;
  }

  // SIGINT and SIGTERM to the launcher go on to the workers.
  void ForwardSignals() {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
        outcome_.interrupted_by = static_cast<int>(info.ssi_signo);
        Say(absl::StrCat("received signal ", info.ssi_signo, ", forwarding to the workers"));
        StopAll(static_cast<int>(info.ssi_signo));
      }
    }
  }

  void ReapExited() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& w : workers_) {
        if (w.pid != pid) continue;
        w.exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        Exited(w);
      }
    }
  }

  // fds[2...] are the workers' output pipes.
  void ForwardOutput(const std::vector<pollfd>& fds) {
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      for (auto& w : workers_) {
        if (w.output_fd != fds[i].fd) continue;
        char buffer[4096];
        const ssize_t n = read(w.output_fd, buffer, sizeof(buffer));
        if (n > 0) {
          Emit(w, buffer, static_cast<size_t>(n), false);
        } else {
          Emit(w, "", 0, true);
          close(w.output_fd);
          w.output_fd = -1;
        }
      }
    }
  }

  std::vector<Worker>& workers_;
  const int signal_fd_;
  const int failure_fd_;
  const absl::Duration grace_;
  ElasticRestarts* const elastic_;
  const Respawn& respawn_;
  const absl::Duration restart_timeout_;
  Outcome outcome_;
  std::vector<Worker> restarted_;  // appended to workers_ between loops
  std::vector<PendingRestart> pending_;
  std::optional<absl::Time> kill_at_;
};

}  // namespace

void Say(const std::string& text) {
  std::string line = "[tessera-run] " + text + "\n";
  [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
}

Worker Spawn(const LaunchOptions& options, int rank, int local_rank, int world_size,
             const std::string& join, int port, const std::string& role_file,
             const sigset_t& original_mask) {
  Worker worker;
  worker.rank = rank;
  worker.local_rank = local_rank;
  worker.world_size = world_size;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    Say(absl::StrCat("cannot start rank ", worker.rank, ": pipe: ", std::strerror(errno)));
    worker.exit = 127;
    return worker;
  }
  SpawnOptions spawn;
  spawn.argv = options.command;
  spawn.env = {
      {"RANK", std::to_string(worker.rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"TESSERA_STORE_HOSTED", "1"},
      {"TESSERA_JOIN", join},
      {store::kRendezvousTimeoutVariable,
       std::to_string(std::max<int64_t>(1, absl::ToInt64Seconds(options.rendezvous_timeout)))}};
  if (!options.store_url.empty()) spawn.env.push_back({"TESSERA_STORE", options.store_url});
  if (!role_file.empty()) spawn.env.push_back({"TESSERA_ROLE_FILE", role_file});
  if (!options.trace_dir.empty()) spawn.env.push_back({"TESSERA_TRACE", options.trace_dir});
  if (options.tune_malloc) {
    for (auto& setting : WorkerMallocSettings()) spawn.env.push_back(std::move(setting));
  }
  spawn.output_fd = fds[1];
  // Workers start with default signal handling, whatever the launcher
  // inherited (an ignored SIGTERM would defeat stopping them).
  spawn.default_signals = {SIGINT, SIGTERM, SIGPIPE, SIGCHLD};
  spawn.signal_mask = &original_mask;
  absl::StatusOr<pid_t> pid = tessera::Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    Say(absl::StrCat("cannot start rank ", worker.rank, ": ", pid.status().message()));
    close(fds[0]);
    worker.exit = 127;
    return worker;
  }
  worker.pid = *pid;
  worker.output_fd = fds[0];
  return worker;
}

Outcome Supervise(std::vector<Worker>& workers, int signal_fd, int failure_fd, absl::Duration grace,
                  ElasticRestarts* elastic, const Respawn& respawn,
                  absl::Duration restart_timeout) {
  return Supervisor(workers, signal_fd, failure_fd, grace, elastic, respawn, restart_timeout).Run();
}

ScratchDir::ScratchDir() {
  std::string path = (std::filesystem::temp_directory_path() / "tessera-run.XXXXXX").string();
  if (mkdtemp(path.data()) != nullptr) path_ = path;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

void ScratchDir::Empty() const {
  std::error_code ignored;
  if (path_.empty()) return;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ignored)) {
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

}  // namespace tessera::launcher
