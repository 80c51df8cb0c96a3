// The sharded parameter server (ps/) across separate network hosts: two
// servers and two trainers, each on a host of its own, so every pull, push
// and clock crosses a host (TCP), and the shard map is read through the
// store on host 0. Then the recommender loses a server's machine and
// finishes on its shards' backups (Note [Parameter-server replication],
// ps/ps_server.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/multihost/job.h"
#include "tests/testing/launcher_process.h"
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

constexpr char kRecommender[] = "examples/ps_recommender/ps_recommender";

// The recommender, synchronous, on four hosts — ps0, ps1, trainer0,
// trainer1, one each; each shard's backup is on the other server's host —
// under launchers that let the job run on without a lost node's server.
std::unique_ptr<Job> StartRecommender(NetworkHosts& hosts) {
  return Job::Launched(hosts, 1,
                       {kRecommender, "--servers", "2", "--consistency", "sync", "--samples",
                        "200000", "--test_samples", "20000", "--log_every", "100"},
                       {}, "",
                       {"--nnodes", "3:4", "--node_timeout", "10", "--elastic_roles", "server",
                        "--max_restarts", "1"});
}

// Trainer 0's test AUC in a finished job's output.
double Auc(Job& job) { return FirstNumber(job.on(2).output(), "test AUC ([0-9.]+)"); }

// Scenario: the recommender loses ps1's machine mid-training — its link
// goes down, so not even a FIN gets out, then everything on it is killed.
// ps0, the backup of ps1's shard, takes it over once ps1 has been silent
// for the failure timeout; the trainers' calls follow the shard; nothing
// restarts; the job finishes with an undisturbed run's AUC (±0.005).
TEST(MultiHostPsTest, ARecommenderThatLosesAServersMachineFinishesWithTheSameAuc) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  auto undisturbed = StartRecommender(hosts);
  ASSERT_EQ(undisturbed->Finish(absl::Seconds(300)), std::vector<int>(4, 0))
      << undisturbed->output();
  const double expected = Auc(*undisturbed);

  auto job = StartRecommender(hosts);
  ASSERT_TRUE(job->on(2).WaitFor("step 300/", 1, absl::Seconds(180))) << job->output();
  ASSERT_TRUE(hosts.SetLink(1, /*up=*/false).ok());
  ASSERT_EQ(::kill(job->on(1).pid(), SIGKILL), 0);
  for (int host : {0, 2, 3}) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(300)), 0) << job->output();
  }
  const std::string out = job->output();
  EXPECT_TRUE(absl::StrContains(out, "parameter server 'ps0' is the primary of shard 1")) << out;
  EXPECT_FALSE(absl::StrContains(out, "restarting")) << "a process restarted\n" << out;
  const double auc = Auc(*job);
  EXPECT_NEAR(auc, expected, 0.005) << out;
  std::printf("undisturbed AUC %.4f; after losing ps1's machine %.4f\nwhat the user saw:\n%s",
              expected, auc, out.c_str());
}

}  // namespace
}  // namespace tessera::testing
