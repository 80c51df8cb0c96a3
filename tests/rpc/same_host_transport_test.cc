// The same-host transport (see Note [Same-host transport], rpc/tensorpipe/
// transport_choice.cc), with real worker processes: an idle worker sleeps
// instead of polling a core, its Unix socket is guarded like its TCP port,
// and forcing TCP on one host still works.
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_cpu.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {
namespace {

// The abstract Unix-socket names a worker process listens on: its
// same-host listeners are "@tessera_<pid>_<n>_<name>" (/proc/net/unix lists
// every socket bound to a name, its name last).
std::vector<std::string> SameHostListeners(pid_t pid) {
  std::ifstream in("/proc/net/unix");
  const std::string prefix = absl::StrCat("@tessera_", pid, "_");
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) {
    const auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string name = line.substr(space + 1);
    if (name.rfind(prefix, 0) == 0) names.insert(name);
  }
  return {names.begin(), names.end()};
}

void SendToAbstractSocket(const std::string& at_name, const std::string& bytes) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(at_name.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path + 1, at_name.data() + 1, at_name.size() - 1);
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + at_name.size());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), length), 0) << strerror(errno);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

using SameHostTransportTest = RpcWorld;

// TensorPipe's shm transport busy-polled a core in every process for the
// whole job (issue 32); the default now sleeps once its answers are in.
TEST_F(SameHostTransportTest, AnIdleWorkerSleeps) {
  StartWorld(2);
  // Connections in both directions, as in any job.
  ASSERT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  ASSERT_EQ(rt()
                .RpcSync<at::Tensor>("worker1", "nested", std::vector<std::string>{"worker0"},
                                     at::zeros({2}))
                .sum()
                .item<float>(),
            4.0f);
  const pid_t child = children_[0]->pid();
  const double child_before = ProcessCpuSeconds(child);
  const double self_before = ProcessCpuSeconds(getpid());
  // The window to measure over (not a wait for an event): busy-polling
  // would use all of it, a sleeping worker almost none.
  absl::SleepFor(absl::Seconds(3));
  const double child_used = ProcessCpuSeconds(child) - child_before;
  const double self_used = ProcessCpuSeconds(getpid()) - self_before;
  EXPECT_LT(child_used, 0.3) << "an idle worker used " << child_used << " s of CPU in 3 s";
  EXPECT_LT(self_used, 0.3) << "the idle test process used " << self_used << " s of CPU in 3 s";
}

// The same-host listener gets the TCP port's treatment (docs/security.md):
// a local process's garbage closes its own connection only.
TEST_F(SameHostTransportTest, GarbageOnTheUnixSocketLeavesTheWorkerServing) {
  StartWorld(2);
  const std::vector<std::string> listeners = SameHostListeners(children_[0]->pid());
  ASSERT_EQ(listeners.size(), 1u) << "worker1 listens on " << listeners.size()
                                  << " same-host sockets";
  const std::string& at = listeners.front();
  SendToAbstractSocket(at, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  SendToAbstractSocket(at, std::string("\x00\x00\x00\x40\x00\x00\x00\x00", 8));  // 1 GiB
  for (size_t zeros : {1, 8, 16, 40, 100, 10000}) SendToAbstractSocket(at, std::string(zeros, '\0'));
  SendToAbstractSocket(at, std::string("TSRGATE1") + std::string(32, 'n') + std::string(32, 'p'));
  // Calls go on: TensorPipe opens its same-host connections to this socket.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{11}), 11);
  EXPECT_EQ(rt().RpcSync<at::Tensor>("worker1", "echo", at::ones({1 << 20})).sum().item<float>(),
            float(1 << 20));
}

// TESSERA_TENSORPIPE_SAME_HOST=tcp: the cross-host path on one machine.
TEST_F(SameHostTransportTest, ForcedTcpListensOnNoUnixSocketAndServes) {
  setenv("TESSERA_TENSORPIPE_SAME_HOST", "tcp", 1);
  StartWorld(2, {{"TESSERA_TENSORPIPE_SAME_HOST", "tcp"}});
  unsetenv("TESSERA_TENSORPIPE_SAME_HOST");
  EXPECT_TRUE(SameHostListeners(children_[0]->pid()).empty());
  EXPECT_TRUE(SameHostListeners(getpid()).empty());
  EXPECT_EQ(rt().RpcSync<at::Tensor>("worker1", "echo", at::ones({1 << 20})).sum().item<float>(),
            float(1 << 20));
}

}  // namespace
}  // namespace tessera::testing
