// EtcdCluster: real etcd members (Debian's etcd-server) for tests of the
// store on etcd — on 127.0.0.1, or one on each network host
// (network_hosts.h), each on free ports with a data directory of its own,
// removed with the cluster.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {

class EtcdCluster {
 public:
  // `members` members on 127.0.0.1, serving once this returns.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> StartLocal(int members);
  // A member on every one of `hosts` (member i on host i), listening on the
  // host's address. Not awaited: this process cannot reach the hosts (the
  // job's launchers wait for the store).
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> StartOn(NetworkHosts& hosts);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // The store address of a job named `job` on this cluster:
  // etcd://<every member's client endpoint>/<job>.
  std::string Url(const std::string& job) const;
  // SIGKILLs member `member` (on a network host: everything in its PID namespace).
  void Kill(int member);
  // The process of member `member` (to freeze it: SIGSTOP, then SIGCONT).
  pid_t pid(int member) const;
  // The last lines of every member's log, for a failing test's message.
  std::string Logs() const;

 private:
  EtcdCluster() = default;
  // Starts member i of `addresses`, each through `wrappers[i]` (may be empty).
  absl::Status Start(const std::vector<std::string>& addresses,
                     const std::vector<std::vector<std::string>>& wrappers);

  std::string data_dir_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<ObservedProcess>> members_;
};

}  // namespace tessera::testing
