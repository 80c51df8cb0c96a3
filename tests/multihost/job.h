// Job: one process per network host (tests/testing/network_hosts.h), as a
// user's job on several machines runs — tessera-run on each host
// (Job::Launched) or the worker itself (Job::Direct, as Kubernetes or srun
// start them). Shared by the multi-host tests.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

// What every process of a test job gets: the job's secret, and INFO logs
// (addresses and transport choices are logged there).
Env JobEnv(Env env);

class Job {
 public:
  // tessera-run on every host (node rank = host index), `nproc` workers
  // each, meeting at `master` (host 0's address when empty).
  static std::unique_ptr<Job> Launched(NetworkHosts& hosts, int nproc,
                                       std::vector<std::string> command, Env env = {},
                                       std::string master = "",
                                       std::vector<std::string> extra_args = {},
                                       std::function<Env(int host)> host_env = nullptr);
  // `command` started directly on every host, with `env_of(host, port)`;
  // `port` is a free one for the store, also put where "{port}" is in `command`.
  static std::unique_ptr<Job> Direct(NetworkHosts& hosts, std::vector<std::string> command,
                                     const std::function<Env(int, const std::string&)>& env_of);

  // Every process's exit code, waiting up to `timeout` in all.
  std::vector<int> Finish(absl::Duration timeout = absl::Seconds(240));
  ObservedProcess& on(int host) { return *processes_[host]; }
  // Every host's output, each under a "---- host N ----" line.
  std::string output() const;

 private:
  Job() = default;
  std::vector<std::unique_ptr<ObservedProcess>> processes_;
};

// The distinct parameter fingerprints ("parameters <hash> after <steps>
// steps", as examples/fault_tolerant_ddp prints them) of hosts [0, hosts)
// of a finished job, "none" for a host that printed none: one entry when
// every replica ended identical.
std::set<std::string> Fingerprints(Job& job, int hosts, int steps);
// The same for the hosts listed.
std::set<std::string> Fingerprints(Job& job, const std::vector<int>& hosts, int steps);

}  // namespace tessera::testing
