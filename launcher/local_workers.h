// This node's workers: starting each with its environment (Spawn), then
// supervising them until all have exited (Supervise) — their output
// forwarded line by line, the rest stopped when one fails, an elastic rank
// restarted alone (see Note [Restarting a rank alone]), the launcher's signals
// passed on.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/elastic_restarts.h"
#include "launcher/launcher.h"

namespace tessera::launcher {

// The launcher's own messages, on stderr: "[tessera-run] <text>".
void Say(const std::string& text);

struct Worker {
  int rank = -1;
  int local_rank = -1;
  int world_size = 0;  // WORLD_SIZE as this worker was told it
  pid_t pid = -1;
  int output_fd = -1;       // the worker's stdout and stderr
  std::string partial;      // output not yet ended by a newline
  std::optional<int> exit;  // exit code, or 128 + signal
};

// Starts one worker with its environment; its output goes to a pipe. A
// worker that cannot be started is reported and counts as having exited
// with 127, as a shell's "command not found". `join` is TESSERA_JOIN:
// empty at the job's start, "rejoin" for a rank restarted alone, "join" for
// a rank beyond the initial ones. `role_file` (if not empty) is where the
// worker declares its role (TESSERA_ROLE_FILE, store/elastic_role.h).
Worker Spawn(const LaunchOptions& options, int rank, int local_rank, int world_size,
             const std::string& join, int port, const std::string& role_file,
             const sigset_t& original_mask);

struct Outcome {
  std::optional<int> failed_rank;  // the first worker that failed
  int failed_code = 0;
  int interrupted_by = 0;         // a signal the launcher received
  bool failed_elsewhere = false;  // another node reported a failure
  std::vector<int> given_up;      // elastic ranks out of restarts, let go
  bool any_succeeded = false;     // some worker of this node exited 0
};

// Starts a failed worker's rank again by itself (see Note [Restarting a rank
// alone]); null when no rank restarts alone.
using Respawn = std::function<Worker(const Worker& failed)>;

// Runs until every worker has exited and its output is drained. `failure_fd`
// (or -1) becomes readable when another node's worker failed. With
// `elastic`, a failed worker of an elastic role is restarted by `respawn`
// (or let go) instead of stopping the group; the store out of reach delays
// the restart by up to `restart_timeout`. Workers still running `grace`
// after being told to stop are killed.
Outcome Supervise(std::vector<Worker>& workers, int signal_fd, int failure_fd, absl::Duration grace,
                  ElasticRestarts* elastic, const Respawn& respawn, absl::Duration restart_timeout);

// A directory of the launcher's own (its workers' role files), removed
// with it; path() is empty if none could be made.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  // Removes what the directory holds, keeping it.
  void Empty() const;

 private:
  std::string path_;
};

}  // namespace tessera::launcher
