// ObservedProcess: a process whose combined stdout and stderr the test
// reads, with bounded waits. Killed if the test did not reap it. Launcher:
// one running tessera-run (launcher/tessera-run, a data dependency of the
// test).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera::testing {

class ObservedProcess {
 public:
  // Runs `argv`.
  explicit ObservedProcess(std::vector<std::string> argv);
  ~ObservedProcess();
  ObservedProcess(const ObservedProcess&) = delete;
  ObservedProcess& operator=(const ObservedProcess&) = delete;

  // Reads output until `text` appears `count` times (true) or the deadline (false).
  bool WaitFor(const std::string& text, int count = 1, absl::Duration timeout = absl::Seconds(60));
  // Reads everything, then reaps the launcher: its exit code, -1 on timeout.
  int Finish(absl::Duration timeout = absl::Seconds(60));
  int Count(const std::string& text) const;
  // Reads what the process has written so far, without waiting, so that
  // its pipe never fills while the test is busy elsewhere.
  void Drain();
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

 private:
  bool ReadSome(absl::Time deadline);

  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_code_ = -1;
  std::string output_;
};

// The first capture group of `pattern` (a std::regex) in `text`, as a
// number; -1 when it does not match. For reading numbers off job output.
double FirstNumber(const std::string& text, const std::string& pattern);

class Launcher : public ObservedProcess {
 public:
  // Runs tessera-run with `args`, through `wrapper` when given (e.g.
  // NetworkHosts::On, to run it on another host).
  explicit Launcher(std::vector<std::string> args, std::vector<std::string> wrapper = {});
};

}  // namespace tessera::testing
