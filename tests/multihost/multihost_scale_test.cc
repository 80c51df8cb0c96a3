// A connection storm across separate network hosts (issue 32): 4 hosts × 8
// workers, tessera-run on each, all 32 meet, every worker calls every other
// at the same moment (992 calls: TCP between hosts, Unix sockets within
// one), hands an RRef to a third worker and shuts down gracefully
// (bench/scale_probe.cc). Each worker keeps at most 4 idle connections
// (see Note [Idle connections]), so the storm also closes and redials
// connections across hosts while calls are in flight: nobody may take a
// closed connection for a failure. Every worker must finish with every
// answer checked. Timings are bench/scale.sh --hosts's business.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/multihost/job.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {
namespace {

constexpr int kHosts = 4;
constexpr int kPerHost = 8;

TEST(MultiHostScaleTest, ThirtyTwoWorkersOnFourHostsMeetCallEachOtherAndShutDown) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, kHosts);
  auto job = Job::Launched(hosts, kPerHost, {"bench/scale_probe", "--timeout_s", "240"},
                           {{"TESSERA_MAX_IDLE_CONNECTIONS", "4"}});
  EXPECT_EQ(job->Finish(absl::Seconds(400)), std::vector<int>(kHosts, 0)) << job->output();
  const std::string out = job->output();
  const std::regex finished("scale rank (\\d+) of 32: start");
  int count = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), finished);
       it != std::sregex_iterator(); ++it) {
    ++count;
  }
  EXPECT_EQ(count, kHosts * kPerHost) << out;
  // What scale_probe prints when a phase fails ("scale rank R: <phase>
  // failed: ...") or it throws.
  EXPECT_FALSE(std::regex_search(out, std::regex("scale rank \\d+: [^\\n]* failed|scale_probe: ")))
      << out;
}

}  // namespace
}  // namespace tessera::testing
