// NetworkHosts: separate network hosts on this machine, for tests of jobs
// that span machines. Loopback hides every addressing bug; these do not.
//
// Each host is a network namespace with its own interface (eth0), IPv4
// address (10.88.0.<host+1>/24), IPv6 address (fd88::<host+1>/64) and host
// names (host0, host1, ... in each host's /etc/hosts), all joined by a
// bridge in a switch namespace of their own, so nothing touches this
// machine's own network. Commands run on a host also get a PID namespace of
// their own: TensorPipe's cma channel (like its shm transport) is used only
// between processes whose namespaces match, so each host is as separate as a
// machine to it, and killing the command's first process (the host's
// tessera-run) kills everything on that host, like a machine going down.
// And a time namespace: each host's CLOCK_MONOTONIC is this machine's plus
// MonotonicOffset(host), as machines booted at different times differ (the
// wall clock, CLOCK_REALTIME, cannot be set apart: it is shared).
//
// Needs root (CI runs as root). Everything made is removed by the
// destructor, also when the test fails; a run killed before that leaves
// namespaces named tsr<pid>*, removed by the next run once <pid> is gone.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::testing {

class NetworkHosts {
 public:
  // Makes `count` hosts (1-8). An error says why (not root, no `ip`).
  static absl::StatusOr<std::unique_ptr<NetworkHosts>> Create(int count);
  ~NetworkHosts();
  NetworkHosts(const NetworkHosts&) = delete;
  NetworkHosts& operator=(const NetworkHosts&) = delete;

  int size() const { return count_; }
  std::string address(int host) const;   // "10.88.0.1" for host 0
  std::string address6(int host) const;  // "fd88::1"
  std::string name(int host) const;      // "host0", resolvable on every host

  // The argv that runs `command` on `host`, with `env` set on top of this
  // process's environment (for tests::Launcher's wrapper, or Spawn).
  std::vector<std::string> On(int host,
                              const std::vector<std::pair<std::string, std::string>>& env = {})
      const;

  // What host `host`'s CLOCK_MONOTONIC reads ahead of this machine's.
  static absl::Duration MonotonicOffset(int host);

  // Takes host `host`'s link to the switch down (a cut cable) or up.
  absl::Status SetLink(int host, bool up);
  // Cuts (or mends) the path between hosts `a` and `b` alone, both ways:
  // each drops what it sends to the other (a blackhole route), while both
  // still reach every other host — a partial partition.
  absl::Status SetPath(int a, int b, bool up);

 private:
  explicit NetworkHosts(int count);
  std::string Namespace(int host) const;

  const int count_;
  const std::string prefix_;  // tsr<pid>
  std::vector<std::string> made_;  // namespaces to delete
};

// In a test: the hosts, or skips the test naming why they cannot be made —
// fails instead under CI=true, where the suite must really run them.
#define TESSERA_NETWORK_HOSTS_OR_SKIP(var, count)                                  \
  auto var##_or = ::tessera::testing::NetworkHosts::Create(count);                 \
  if (!var##_or.ok()) {                                                            \
    if (::tessera::testing::NetworkHostsRequired()) {                              \
      FAIL() << "cannot make network hosts (required under CI=true): "            \
             << var##_or.status();                                                 \
    }                                                                              \
    GTEST_SKIP() << "cannot make network hosts: " << var##_or.status();           \
  }                                                                                \
  ::tessera::testing::NetworkHosts& var = **var##_or

// Whether CI=true: multi-host tests must run, not skip.
bool NetworkHostsRequired();

}  // namespace tessera::testing
