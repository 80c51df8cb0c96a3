// 64 workers on one host (issue 32): tessera-run starts them all at once,
// they meet, every worker calls every other at the same moment (4032 calls,
// and as many connections dialled at once), each hands an RRef to a third
// worker, and all shut down gracefully. Every worker must finish with every
// answer checked (bench/scale_probe.cc). Timings are printed, not asserted:
// bench/scale.sh measures them. The job starts with a soft descriptor limit
// of 256, below what 64 workers need (Note [Descriptor limit]): tessera-run
// and the workers must raise it.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <regex>
#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

constexpr int kWorkers = 64;

TEST(ScaleTest, SixtyFourWorkersOnOneHostMeetCallEachOtherAndShutDown) {
  struct rlimit limit {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_GT(limit.rlim_max, 1024u) << "this host allows too few descriptors for the test";
  Launcher launcher({"--nproc_per_node", std::to_string(kWorkers), "--standalone",
                     "bench/scale_probe", "--timeout_s", "300"},
                    {"prlimit", "--nofile=256:" + std::to_string(limit.rlim_max), "--"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(600)), 0) << launcher.output();
  const std::string& out = launcher.output();
  const std::regex finished("scale rank (\\d+) of 64: start");
  int count = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), finished);
       it != std::sregex_iterator(); ++it) {
    ++count;
  }
  EXPECT_EQ(count, kWorkers) << out;
  EXPECT_EQ(out.find("failed"), std::string::npos) << out;
  // The slowest worker's phases, for the log.
  for (const char* phase : {"start", "all_to_all", "rref", "shutdown"}) {
    double worst = 0;
    const std::regex timing(std::string(phase) + " (\\d+) ms");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), timing);
         it != std::sregex_iterator(); ++it) {
      worst = std::max(worst, std::stod((*it)[1].str()));
    }
    std::printf("slowest %s: %.0f ms\n", phase, worst);
  }
}

}  // namespace
}  // namespace tessera::testing
