// See Note [Idle connections] (rpc/idle_connections.h), on every backend with
// real worker processes: beyond the bound, a caller's least recently used
// idle connections close — the callee is told, so nobody takes it for a
// failure — and the next call connects again.
#include <gtest/gtest.h>
#include <sys/types.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {
namespace {

// Connections a worker process accepted that are still open: Unix sockets
// under its same-host listener's name (TensorPipe; "03": connected), and
// TCP connections established to its port (gRPC; "01": established).
int AcceptedConnections(pid_t pid, int port) {
  int count = 0;
  std::ifstream unix_sockets("/proc/net/unix");
  const std::string prefix = absl::StrCat("@tessera_", pid, "_");
  for (std::string line; std::getline(unix_sockets, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 8 && fields[5] == "03" && fields[7].rfind(prefix, 0) == 0) ++count;
  }
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream tcp(table);
    for (std::string line; std::getline(tcp, line);) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 4 || fields[3] != "01") continue;
      const size_t colon = fields[1].rfind(':');
      int local_port = 0;
      if (colon != std::string::npos &&
          absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) && local_port == port) {
        ++count;
      }
    }
  }
  return count;
}

int PortOf(const std::string& address) {
  int port = 0;
  const bool parsed = absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  EXPECT_TRUE(parsed) << address;
  return port;
}

class IdleConnectionsTest : public RpcWorld {
  void Configure(rpc::RpcOptions& options) override { options.max_idle_connections = 1; }
};

TEST_F(IdleConnectionsTest, BeyondTheBoundTheyCloseAndNobodyCallsItAFailure) {
  StartWorld(4);
  const std::vector<std::string> peers = {"worker1", "worker2", "worker3"};
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < peers.size(); ++i) {
      const int64_t value = round * 10 + static_cast<int64_t>(i);
      EXPECT_EQ(rt().RpcSync<int64_t>(peers[i], "echo", value), value) << peers[i];
    }
  }
  // Only the last callee's connection is kept; the others' close once they
  // read the goodbye.
  auto accepted = [&](int rank) {
    return AcceptedConnections(children_[rank - 1]->pid(), PortOf(rt().workers()[rank].address));
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((accepted(1) > 0 || accepted(2) > 0) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition, with a deadline
  }
  EXPECT_EQ(accepted(1), 0);
  EXPECT_EQ(accepted(2), 0);
  EXPECT_GT(accepted(3), 0);
  for (const std::string& peer : peers) {
    for (const std::string& event :
         rt().RpcSync<std::vector<std::string>>(peer, "membership_events")) {
      EXPECT_NE(event, "failed worker0") << peer;
      EXPECT_NE(event, "left worker0") << peer;
    }
  }
}

}  // namespace
}  // namespace tessera::testing
