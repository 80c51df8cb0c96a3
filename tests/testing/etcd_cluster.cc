#include "tests/testing/etcd_cluster.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_address.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "store/store_url.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::StartLocal(int members) {
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  auto started = cluster->Start(std::vector<std::string>(members, "127.0.0.1"),
                                std::vector<std::vector<std::string>>(members));
  if (!started.ok()) return started;
  // Serving once a write goes through (an elected leader, a quorum).
  TESSERA_ASSIGN_OR_RETURN(auto client,
                           store::ConnectStore(cluster->Url("ready"), absl::Seconds(30), {}));
  if (auto ready = client->Set("ready", "1"); !ready.ok()) {
    return absl::UnavailableError(
        absl::StrCat("etcd did not start serving: ", ready.message(), "\n", cluster->Logs()));
  }
  (void)(client)->Delete("ready");
  return cluster;
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::StartOn(NetworkHosts& hosts) {
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  std::vector<std::string> addresses;
  std::vector<std::vector<std::string>> wrappers;
  for (int host = 0; host < hosts.size(); ++host) {
    addresses.push_back(hosts.address(host));
    wrappers.push_back(hosts.On(host));
  }
  auto started = cluster->Start(addresses, wrappers);
  if (!started.ok()) return started;
  return cluster;
}

absl::Status EtcdCluster::Start(const std::vector<std::string>& addresses,
                                const std::vector<std::vector<std::string>>& wrappers) {
  auto etcd = FindProgram("etcd");
  if (!etcd.ok()) {
    return absl::FailedPreconditionError(
        "no etcd: Debian's etcd-server (scripts/install_deps.sh installs it)");
  }
  std::string dir_template = absl::StrCat(
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp", "/etcd.XXXXXX");
  if (mkdtemp(dir_template.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  data_dir_ = dir_template;
  std::vector<std::string> peers;
  std::vector<int> client_ports;
  for (size_t i = 0; i < addresses.size(); ++i) {
    client_ports.push_back(FreeLoopbackPort());
    peers.push_back(
        absl::StrCat("m", i, "=http://", JoinHostPort(addresses[i], FreeLoopbackPort())));
    endpoints_.push_back(JoinHostPort(addresses[i], client_ports[i]));
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    const std::string name = absl::StrCat("m", i);
    const std::string peer_url = peers[i].substr(name.size() + 1);
    const std::string client_url = absl::StrCat("http://", endpoints_[i]);
    const std::vector<std::string> args = {*etcd,
                                           "--name",
                                           name,
                                           "--data-dir",
                                           absl::StrCat(data_dir_, "/", name),
                                           "--listen-client-urls",
                                           client_url,
                                           "--advertise-client-urls",
                                           client_url,
                                           "--listen-peer-urls",
                                           peer_url,
                                           "--initial-advertise-peer-urls",
                                           peer_url,
                                           "--initial-cluster",
                                           absl::StrJoin(peers, ","),
                                           "--initial-cluster-state",
                                           "new",
                                           "--initial-cluster-token",
                                           data_dir_};
    // Its log to a file: a pipe nobody reads would fill and stop it.
    std::vector<std::string> argv = wrappers[i];
    for (const char* shell : {"sh", "-c"}) argv.push_back(shell);
    argv.push_back(absl::StrCat("exec \"$0\" \"$@\" > ", data_dir_, "/", name, ".log 2>&1"));
    argv.insert(argv.end(), args.begin(), args.end());
    members_.push_back(std::make_unique<ObservedProcess>(std::move(argv)));
  }
  return absl::OkStatus();
}

EtcdCluster::~EtcdCluster() {
  for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
  if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_);
}

std::string EtcdCluster::Url(const std::string& job) const {
  return absl::StrCat("etcd://", absl::StrJoin(endpoints_, ","), "/", job);
}

void EtcdCluster::Kill(int member) {
  if (members_[member] == nullptr || members_[member]->pid() <= 0) return;
  ::kill(members_[member]->pid(), SIGKILL);
  members_[member]->Finish(absl::Seconds(10));
  members_[member].reset();
}

pid_t EtcdCluster::pid(int member) const {
  return members_[member] == nullptr ? -1 : members_[member]->pid();
}

std::string EtcdCluster::Logs() const {
  std::string logs;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    std::ifstream file(absl::StrCat(data_dir_, "/m", i, ".log"));
    std::stringstream text;
    text << file.rdbuf();
    const std::string all = text.str();
    absl::StrAppend(&logs, "---- etcd member ", i, " (", endpoints_[i], ") ----\n",
                    all.size() > 2000 ? all.substr(all.size() - 2000) : all);
  }
  return logs;
}

}  // namespace tessera::testing
