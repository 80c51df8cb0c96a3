#include "tests/testing/network_hosts.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"

namespace tessera::testing {
namespace {

constexpr char kSwitch[] = "sw";

// Runs `argv` to completion; its output, or an error quoting it.
absl::StatusOr<std::string> Run(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.output_fd = fds[1];
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(*pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", absl::StrJoin(argv, " "), "' failed: ", output));
  }
  return output;
}

// Kills every process in network namespace `ns`, then deletes it.
void DeleteNamespace(const std::string& ns) {
  if (auto pids = Run({"ip", "netns", "pids", ns}); pids.ok()) {
    for (absl::string_view line : absl::StrSplit(*pids, '\n', absl::SkipEmpty())) {
      int pid = 0;
      if (absl::SimpleAtoi(line, &pid) && pid > 1) ::kill(pid, SIGKILL);
    }
  }
  Run({"ip", "netns", "del", ns}).IgnoreError();
  Run({"rm", "-rf", "/etc/netns/" + ns}).IgnoreError();
}

// Removes what runs killed before their destructor left: tsr<pid>* of
// processes that are gone.
void RemoveStale() {
  DIR* dir = opendir("/var/run/netns");
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    if (!absl::ConsumePrefix(&name, "tsr")) continue;
    const size_t digits = name.find_first_not_of("0123456789");
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, digits), &pid)) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry->d_name);
  }
  closedir(dir);
  for (const auto& ns : stale) DeleteNamespace(ns);
}

}  // namespace

bool NetworkHostsRequired() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

NetworkHosts::NetworkHosts(int count) : count_(count), prefix_(absl::StrCat("tsr", getpid())) {}

NetworkHosts::~NetworkHosts() {
  // Hosts first: their processes die with them.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) DeleteNamespace(*it);
}

std::string NetworkHosts::Namespace(int host) const { return absl::StrCat(prefix_, "h", host); }
std::string NetworkHosts::address(int host) const { return absl::StrCat("10.88.0.", host + 1); }
std::string NetworkHosts::address6(int host) const { return absl::StrCat("fd88::", host + 1); }
std::string NetworkHosts::name(int host) const { return absl::StrCat("host", host); }

absl::StatusOr<std::unique_ptr<NetworkHosts>> NetworkHosts::Create(int count) {
  if (count < 1 || count > 8) return absl::InvalidArgumentError("1 to 8 hosts");
  if (geteuid() != 0) return absl::PermissionDeniedError("network namespaces need root");
  RemoveStale();
  std::unique_ptr<NetworkHosts> hosts(new NetworkHosts(count));
  const std::string sw = hosts->prefix_ + kSwitch;
  auto run = [](std::vector<std::string> argv) { return Run(argv).status(); };
  if (auto status = run({"ip", "netns", "add", sw}); !status.ok()) return status;
  hosts->made_.push_back(sw);
  for (auto argv : std::vector<std::vector<std::string>>{
           {"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
           {"ip", "-n", sw, "link", "set", "br0", "up"}}) {
    if (auto status = run(argv); !status.ok()) return status;
  }
  std::string etc_hosts = "127.0.0.1 localhost\n::1 localhost\n";
  for (int host = 0; host < count; ++host) {
    absl::StrAppend(&etc_hosts, hosts->address(host), " ", hosts->name(host), "\n");
  }
  for (int host = 0; host < count; ++host) {
    const std::string ns = hosts->Namespace(host);
    const std::string port = absl::StrCat("h", host);
    if (auto status = run({"ip", "netns", "add", ns}); !status.ok()) return status;
    hosts->made_.push_back(ns);
    for (auto argv : std::vector<std::vector<std::string>>{
             {"ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
              ns},
             {"ip", "-n", sw, "link", "set", port, "master", "br0"},
             {"ip", "-n", sw, "link", "set", port, "up"},
             {"ip", "-n", ns, "link", "set", "lo", "up"},
             {"ip", "-n", ns, "addr", "add", hosts->address(host) + "/24", "dev", "eth0"},
             // nodad: usable at once, not after duplicate detection's second or two.
             {"ip", "-n", ns, "addr", "add", hosts->address6(host) + "/64", "dev", "eth0",
              "nodad"},
             {"ip", "-n", ns, "link", "set", "eth0", "up"}}) {
      if (auto status = run(argv); !status.ok()) return status;
    }
    // `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts.
    const std::string dir = "/etc/netns/" + ns;
    mkdir("/etc/netns", 0755);
    mkdir(dir.c_str(), 0755);
    std::ofstream(dir + "/hosts") << etc_hosts;
  }
  return hosts;
}

std::vector<std::string> NetworkHosts::On(
    int host, const std::vector<std::pair<std::string, std::string>>& env) const {
  std::vector<std::string> argv = {"ip", "netns", "exec", Namespace(host), "env"};
  for (const auto& [name, value] : env) argv.push_back(name + "=" + value);
  for (const char* arg : {"unshare", "--pid", "--fork", "--kill-child", "--time", "--monotonic"}) {
    argv.push_back(arg);
  }
  argv.push_back(std::to_string(absl::ToInt64Seconds(MonotonicOffset(host))));
  return argv;
}

absl::Duration NetworkHosts::MonotonicOffset(int host) { return absl::Hours(24) * (host + 1); }

absl::Status NetworkHosts::SetLink(int host, bool up) {
  return Run({"ip", "-n", prefix_ + kSwitch, "link", "set", absl::StrCat("h", host),
              up ? "up" : "down"})
      .status();
}

absl::Status NetworkHosts::SetPath(int a, int b, bool up) {
  for (const auto& [from, to] : {std::pair(a, b), std::pair(b, a)}) {
    for (const std::string& route : {address(to) + "/32", address6(to) + "/128"}) {
      auto done =
          Run({"ip", "-n", Namespace(from), "route", up ? "del" : "add", "blackhole", route});
      if (!done.ok()) return done.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::testing
