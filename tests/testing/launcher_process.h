// Launcher: a tessera-run process (launcher/tessera-run, a data dependency
// of the test) whose combined stdout and stderr the test reads, with bounded
// waits. Killed if the test did not reap it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera::testing {

class Launcher {
 public:
  // Runs tessera-run with `args`, through `wrapper` when given (e.g.
  // NetworkHosts::On, to run it on another host).
  explicit Launcher(std::vector<std::string> args, std::vector<std::string> wrapper = {});
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Reads output until `text` appears `count` times (true) or the deadline (false).
  bool WaitFor(const std::string& text, int count = 1, absl::Duration timeout = absl::Seconds(60));
  // Reads everything, then reaps the launcher: its exit code, -1 on timeout.
  int Finish(absl::Duration timeout = absl::Seconds(60));
  int Count(const std::string& text) const;
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

 private:
  bool ReadSome(absl::Time deadline);

  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_code_ = -1;
  std::string output_;
};

}  // namespace tessera::testing
