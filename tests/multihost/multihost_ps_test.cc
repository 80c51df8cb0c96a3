// The sharded parameter server (ps/) across separate network hosts: two
// servers and two trainers, each on a host of its own, so every pull, push
// and clock crosses a host (TCP), and the shard map is read through the
// store on host 0.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/multihost/job.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {
namespace {

TEST(MultiHostPsTest, TwoServersAndTwoTrainersOnFourHostsTrainOneModel) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  auto job = Job::Launched(hosts, 1,
                           {"examples/ps_batch_updating/ps_batch_updating", "--servers", "2",
                            "--epochs", "1", "--max_steps", "60", "--log_every", "20"});
  EXPECT_EQ(job->Finish(absl::Seconds(400)), std::vector<int>(4, 0)) << job->output();
  // Each trainer reached both servers on another host.
  for (int host : {2, 3}) {
    const std::string& out = job->on(host).output();
    for (int server : {0, 1}) {
      EXPECT_TRUE(absl::StrContains(out, "connecting to 'ps" + std::to_string(server) + "'"))
          << out;
    }
    EXPECT_TRUE(absl::StrContains(out, "tcp transport")) << out;
  }
  const std::regex accuracy("\\[trainer[01]\\] test accuracy ([0-9.]+)%");
  std::vector<std::string> accuracies;
  for (int host : {2, 3}) {
    std::smatch found;
    const std::string& out = job->on(host).output();
    ASSERT_TRUE(std::regex_search(out, found, accuracy)) << job->output();
    accuracies.push_back(found[1].str());
  }
  EXPECT_EQ(accuracies[0], accuracies[1]) << "two models\n" << job->output();
  EXPECT_GT(std::atof(accuracies[0].c_str()), 60.0) << job->output();
}

}  // namespace
}  // namespace tessera::testing
