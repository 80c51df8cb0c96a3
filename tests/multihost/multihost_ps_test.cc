// The sharded parameter server (ps/) across separate network hosts: two
// servers and two trainers, each on a host of its own, so every pull, push
// and clock crosses a host (TCP), and the shard map is read through the
// store on host 0. Then the recommender loses a server — its machine, its
// link for 25 s, the process paused for 30 s, the process killed — and
// finishes on its shards' backups with nothing lost or applied twice (see Note
// [Parameter-server replication], ps/ps_server.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/multihost/job.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/network_hosts.h"
#include "tests/testing/process_table.h"

namespace tessera::testing {
namespace {

// The batch-updating example (synchronous tables) on four hosts — ps0,
// ps1, trainer0, trainer1, one each — under launchers that restart a failed
// server alone. `kill_ps1_at`: once trainer0 logged that step, ps1 (shard
// 1's primary, shard 0's backup) is SIGKILLed mid-step.
std::unique_ptr<Job> BatchUpdating(NetworkHosts& hosts, const std::string& marker) {
  return Job::Launched(hosts, 1,
                       {"examples/ps_batch_updating/ps_batch_updating", "--servers", "2",
                        "--epochs", "1", "--max_steps", "60", "--log_every", "20", "--test_images", "2000"},
                       {{"TESSERA_TEST_JOB", marker}}, "",
                       {"--elastic_roles", "server", "--max_restarts", "1"});
}

// Each trainer's test accuracy, as printed ("" where none).
std::vector<std::string> Accuracies(Job& job) {
  const std::regex accuracy("\\[trainer[01]\\] test accuracy ([0-9.]+)%");
  std::vector<std::string> accuracies;
  for (int host : {2, 3}) {
    std::smatch found;
    const std::string& out = job.on(host).output();
    accuracies.push_back(std::regex_search(out, found, accuracy) ? found[1].str() : "");
  }
  return accuracies;
}

TEST(MultiHostPsTest, TwoServersAndTwoTrainersOnFourHostsTrainOneModel) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  const std::string marker = absl::StrCat("multihost-ps-batch-", getpid());
  auto job = BatchUpdating(hosts, marker);
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
  const std::vector<std::string> accuracies = Accuracies(*job);
  ASSERT_FALSE(accuracies[0].empty()) << job->output();
  EXPECT_EQ(accuracies[0], accuracies[1]) << "two models\n" << job->output();
  EXPECT_GT(std::atof(accuracies[0].c_str()), 60.0) << job->output();

  // ps1 SIGKILLed mid-step: ps0 takes shard 1 over, the trainers' calls
  // follow it, ps1's launcher restarts it alone and it copies both shards
  // back. Synchronous tables average each clock's pushes once, so the
  // model is the undisturbed run's (to the summation order of a clock's
  // pushes, which follows their arrival): both trainers end with one model,
  // within 0.5 points of the undisturbed accuracy.
  auto killed = BatchUpdating(hosts, marker);
  ASSERT_TRUE(killed->on(2).WaitFor("step 20/", 1, absl::Seconds(180))) << killed->output();
  const pid_t ps1 = WorkerPid(marker, 1);
  ASSERT_GT(ps1, 0) << killed->output();
  ASSERT_EQ(::kill(ps1, SIGKILL), 0);
  EXPECT_EQ(killed->Finish(absl::Seconds(400)), std::vector<int>(4, 0)) << killed->output();
  const std::string out = killed->output();
  EXPECT_TRUE(absl::StrContains(out, "parameter server 'ps0' is the primary of shard 1")) << out;
  for (int rank : {0, 2, 3}) {
    EXPECT_FALSE(absl::StrContains(out, absl::StrCat("rank ", rank, " failed"))) << out;
  }
  const std::vector<std::string> after = Accuracies(*killed);
  ASSERT_FALSE(after[0].empty()) << out;
  EXPECT_EQ(after[0], after[1]) << "two models\n" << out;
  EXPECT_NEAR(std::atof(after[0].c_str()), std::atof(accuracies[0].c_str()), 0.5) << out;
  std::printf("batch updating: undisturbed %s%%, ps1 SIGKILLed at step 20: %s%%\n",
              accuracies[0].c_str(), after[0].c_str());
}

constexpr char kRecommender[] = "examples/ps_recommender/ps_recommender";

// The recommender, synchronous, on four hosts — ps0, ps1, trainer0,
// trainer1, one each; each shard's backup is on the other server's host —
// under launchers that let the job run on without a lost node's server
// (declared lost after `node_timeout` seconds) and restart a failed server
// alone. --audit: the trainers count their pushes in a table of their own
// (ExpectEveryPushCountedOnce). Its workers carry TESSERA_TEST_JOB=`marker`
// (WorkerPid finds them).
// The recommender's command on every host (a server added to the job
// runs it too, with --join_as_server).
std::vector<std::string> RecommenderCommand() {
  return {kRecommender, "--servers", "2",     "--consistency", "sync",  "--samples", "200000",
          "--test_samples", "20000", "--log_every", "50", "--audit"};
}

std::unique_ptr<Job> StartRecommender(NetworkHosts& hosts, const std::string& marker,
                                      int node_timeout = 10,
                                      std::vector<std::string> more = {}) {
  std::vector<std::string> command = RecommenderCommand();
  command.insert(command.end(), more.begin(), more.end());
  return Job::Launched(hosts, 1, command, {{"TESSERA_TEST_JOB", marker}}, "",
                       {"--nnodes", "3:4", "--node_timeout", std::to_string(node_timeout),
                        "--elastic_roles", "server", "--max_restarts", "1"});
}

// Trainer 0's test AUC in a finished job's output.
double Auc(Job& job) { return FirstNumber(job.on(2).output(), "test AUC ([0-9.]+)"); }

// The two numbers of the first match of `pattern` in `text` ({-1, -1}: none).
std::pair<int64_t, int64_t> TwoNumbers(const std::string& text, const std::string& pattern) {
  std::smatch found;
  if (!std::regex_search(text, found, std::regex(pattern))) return {-1, -1};
  return {std::stoll(found[1].str()), std::stoll(found[2].str())};
}

// A finished job's audit (examples/ps_recommender/push_audit.h): the
// servers' counting table holds what the two trainers pushed — every
// acknowledged push applied once, none lost, none twice — and trainer 0
// found every replica of every shard identical (ps::CompareReplicas).
void ExpectEveryPushCountedOnce(Job& job) {
  const char kPushed[] = "audit: pushed (\\d+) touches \\(key sum (\\d+)\\)";
  const auto [touches0, keys0] = TwoNumbers(job.on(2).output(), kPushed);
  const auto [touches1, keys1] = TwoNumbers(job.on(3).output(), kPushed);
  const auto [counted, counted_keys] = TwoNumbers(
      job.on(2).output(), "audit: the servers counted (\\d+) touches \\(key sum (\\d+)\\)");
  ASSERT_GT(touches0, 0) << job.output();
  ASSERT_GT(touches1, 0) << job.output();
  EXPECT_EQ(counted, touches0 + touches1) << job.output();
  EXPECT_EQ(counted_keys, keys0 + keys1) << job.output();
  EXPECT_TRUE(absl::StrContains(job.on(2).output(),
                                "audit: every replica of every shard of the 14 tables agrees"))
      << job.output();
  std::printf("the servers counted %lld touches: %lld + %lld pushed\n",
              static_cast<long long>(counted), static_cast<long long>(touches0),
              static_cast<long long>(touches1));
}

class MultiHostRecommenderTest : public ::testing::Test {
 protected:
  // An undisturbed run's AUC (the first test to ask runs it; the others
  // reuse it), its audit checked.
  static double UndisturbedAuc(NetworkHosts& hosts) {
    if (undisturbed_auc_ < 0) {
      auto undisturbed = StartRecommender(hosts, Marker());
      EXPECT_EQ(undisturbed->Finish(absl::Seconds(300)), std::vector<int>(4, 0))
          << undisturbed->output();
      ExpectEveryPushCountedOnce(*undisturbed);
      undisturbed_auc_ = Auc(*undisturbed);
    }
    return undisturbed_auc_;
  }
  static std::string Marker() { return absl::StrCat("multihost-ps-", getpid()); }

  static inline double undisturbed_auc_ = -1;
};

// Scenario: the recommender loses ps1's machine mid-training — its link
// goes down, so not even a FIN gets out, then everything on it is killed.
// ps0, the backup of ps1's shard, takes it over once ps1 has been silent
// for the failure timeout; the trainers' calls follow the shard; nothing
// restarts; the job finishes with an undisturbed run's AUC (±0.005).
// Then ps1's link is cut for 25 s and healed: replaced the same way (3 s
// after the cut), it never acts as primary again; every process finishes,
// with the same AUC. Every time, every push is counted once.
TEST_F(MultiHostRecommenderTest, ARecommenderThatLosesAServersMachineOrLinkFinishesWithTheSameAuc) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  const double expected = UndisturbedAuc(hosts);

  auto cut = StartRecommender(hosts, Marker(), /*node_timeout=*/60);
  ASSERT_TRUE(cut->on(2).WaitFor("step 300/", 1, absl::Seconds(180))) << cut->output();
  ASSERT_TRUE(hosts.SetLink(1, /*up=*/false).ok());
  const absl::Time cut_at = absl::Now();
  ASSERT_TRUE(cut->on(0).WaitFor("'ps0' is the primary of shard 1", 1, absl::Seconds(60)))
      << cut->output();
  std::printf("ps0 took ps1's shard over %.1f s after the cut\n",
              absl::ToDoubleSeconds(absl::Now() - cut_at));
  absl::SleepFor(cut_at + absl::Seconds(25) - absl::Now());  // the fault's length, not a wait
  ASSERT_TRUE(hosts.SetLink(1, /*up=*/true).ok());
  EXPECT_EQ(cut->Finish(absl::Seconds(300)), std::vector<int>(4, 0)) << cut->output();
  // Back, ps1 learns it was replaced; or, if its runtime ended meanwhile
  // (cut off from the store past its timeouts, as in the run this test was
  // written from), its launcher restarts it, holding nothing. Nobody else
  // restarts.
  const std::string& ps1 = cut->on(1).output();
  EXPECT_TRUE(absl::StrContains(ps1, "'ps1' is no longer the primary of shard 1") ||
              absl::StrContains(ps1, "rank 1 failed"))
      << cut->output();
  for (int rank : {0, 2, 3}) {
    EXPECT_FALSE(absl::StrContains(cut->output(), absl::StrCat("rank ", rank, " failed")))
        << cut->output();
  }
  EXPECT_NEAR(Auc(*cut), expected, 0.005) << cut->output();
  ExpectEveryPushCountedOnce(*cut);
  std::printf("undisturbed AUC %.4f; ps1's link cut for 25 s: %.4f\n", expected, Auc(*cut));

  // Lost early (step 50 of 390), so that the machine put in its place
  // joins while the trainers have most of their steps to go.
  auto job = StartRecommender(hosts, Marker());
  ASSERT_TRUE(job->on(2).WaitFor("step 50/", 1, absl::Seconds(180))) << job->output();
  ASSERT_TRUE(job->on(0).WaitFor("rendezvous store at ")) << job->output();
  const int port =
      static_cast<int>(FirstNumber(job->on(0).output(), "rendezvous store at [0-9.]+:(\\d+)"));
  ASSERT_GT(port, 0) << job->output();
  ASSERT_TRUE(hosts.SetLink(1, /*up=*/false).ok());
  ASSERT_EQ(::kill(job->on(1).pid(), SIGKILL), 0);
  ASSERT_TRUE(job->on(0).WaitFor("'ps0' is the primary of shard 1", 1, absl::Seconds(60)))
      << job->output();
  // A new machine in the lost one's place (host 1, its link back, nothing of
  // the job left on it): a server added to the running job, which copies
  // both shards, each short of its backup, while the trainers train on.
  ASSERT_TRUE(hosts.SetLink(1, /*up=*/true).ok());
  std::vector<std::string> join = {"--join", "--master_addr", hosts.address(0), "--master_port",
                                   std::to_string(port)};
  for (const std::string& arg : RecommenderCommand()) join.push_back(arg);
  join.push_back("--join_as_server");
  Launcher added(join, hosts.On(1, JobEnv({{"TESSERA_TEST_JOB", Marker()}})));
  ASSERT_TRUE(added.WaitFor("'ps4' is a backup of shard", 2, absl::Seconds(120)))
      << job->output() << added.output();
  for (int host : {0, 2, 3}) {
    EXPECT_EQ(job->on(host).Finish(absl::Seconds(300)), 0) << job->output();
  }
  EXPECT_EQ(added.Finish(absl::Seconds(60)), 0) << added.output();
  const std::string out = job->output();
  EXPECT_TRUE(absl::StrContains(out, "parameter server 'ps0' is the primary of shard 1")) << out;
  EXPECT_FALSE(absl::StrContains(out, "restarting")) << "a process restarted\n" << out;
  // Every replica of both shards agrees, the added server's among them.
  EXPECT_TRUE(absl::StrContains(job->on(2).output(), "(shard 0 on ps0, ps4; shard 1 on ps0, ps4)"))
      << out;
  const double auc = Auc(*job);
  EXPECT_NEAR(auc, expected, 0.005) << out;
  ExpectEveryPushCountedOnce(*job);
  std::printf(
      "undisturbed AUC %.4f; after losing ps1's machine, a server added in its place: "
      "%.4f\n",
      expected, auc);
}

// Scenario: ps1 — shard 1's primary, shard 0's backup — is paused
// (SIGSTOP) mid-training for 30 s on a host that stays up, its launcher
// answering for the node, and then continued: a zombie that wakes. ps0
// takes shard 1 over once ps1 has been silent for the failure timeout;
// woken, ps1 learns it was replaced (or, its runtime having ended, is
// restarted alone). Then, in a second run, ps1 is SIGKILLed mid-step: its
// connections reset at once, ps0 takes over, and ps1's launcher restarts it
// alone. Both times the job finishes with an undisturbed run's AUC, every
// push counted once, every replica of every shard identical, and no
// process restarted but ps1.
TEST_F(MultiHostRecommenderTest, APausedOrKilledPrimaryIsReplacedAndEveryPushCountedOnce) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  const double expected = UndisturbedAuc(hosts);
  auto expect_only_ps1_restarted = [](Job& job) {
    for (int rank : {0, 2, 3}) {
      EXPECT_FALSE(absl::StrContains(job.output(), absl::StrCat("rank ", rank, " failed")))
          << job.output();
    }
    EXPECT_FALSE(absl::StrContains(job.output(), "restarting the group")) << job.output();
  };

  auto paused = StartRecommender(hosts, Marker());
  ASSERT_TRUE(paused->on(2).WaitFor("step 300/", 1, absl::Seconds(180))) << paused->output();
  const pid_t ps1 = WorkerPid(Marker(), 1);
  ASSERT_GT(ps1, 0) << paused->output();
  ASSERT_EQ(::kill(ps1, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  // Continued however the test ends: a paused process would hold the job.
  struct Continue {
    pid_t pid;
    ~Continue() { ::kill(pid, SIGCONT); }
  } woken{ps1};
  ASSERT_TRUE(paused->on(0).WaitFor("'ps0' is the primary of shard 1", 1, absl::Seconds(60)))
      << paused->output();
  std::printf("ps0 took ps1's shard over %.1f s after ps1 was paused\n",
              absl::ToDoubleSeconds(absl::Now() - stopped));
  absl::SleepFor(stopped + absl::Seconds(30) - absl::Now());  // the fault's length, not a wait
  ASSERT_EQ(::kill(ps1, SIGCONT), 0);
  EXPECT_EQ(paused->Finish(absl::Seconds(300)), std::vector<int>(4, 0)) << paused->output();
  EXPECT_TRUE(
      absl::StrContains(paused->on(1).output(), "'ps1' is no longer the primary of shard 1") ||
      absl::StrContains(paused->on(1).output(), "rank 1 failed"))
      << paused->output();
  expect_only_ps1_restarted(*paused);
  EXPECT_NEAR(Auc(*paused), expected, 0.005) << paused->output();
  ExpectEveryPushCountedOnce(*paused);
  std::printf("undisturbed AUC %.4f; ps1 paused for 30 s: %.4f\n", expected, Auc(*paused));

  auto killed = StartRecommender(hosts, Marker());
  ASSERT_TRUE(killed->on(2).WaitFor("step 300/", 1, absl::Seconds(180))) << killed->output();
  const pid_t victim = WorkerPid(Marker(), 1);
  ASSERT_GT(victim, 0) << killed->output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(killed->Finish(absl::Seconds(300)), std::vector<int>(4, 0)) << killed->output();
  EXPECT_TRUE(
      absl::StrContains(killed->output(), "parameter server 'ps0' is the primary of shard 1"))
      << killed->output();
  expect_only_ps1_restarted(*killed);
  EXPECT_NEAR(Auc(*killed), expected, 0.005) << killed->output();
  ExpectEveryPushCountedOnce(*killed);
  std::printf("undisturbed AUC %.4f; ps1 SIGKILLed: %.4f\n", expected, Auc(*killed));
}

// Scenario: every server lost at once across hosts — ps0 and ps1, each
// on a host of its own, SIGKILLed together mid-training: both replicas of
// both shards (a correlated failure). The servers write a checkpoint every
// 25 steps into one directory both hosts read. Their launchers restart
// them, holding nothing; each restores a shard from the latest checkpoint
// and copies the other as a backup, and the trainers train on, no trainer
// restarted. The job finishes with one model on both trainers, its AUC
// within 0.005 of an undisturbed run's though it lost the clocks since the
// checkpoint, every replica agreeing; the servers say how far each shard
// rolled back.
TEST_F(MultiHostRecommenderTest, EveryServerLostAtOnceComesBackFromTheCheckpoint) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 4);
  const double expected = UndisturbedAuc(hosts);
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ps-checkpoints");
  auto job = StartRecommender(hosts, Marker(), 10,
                              {"--checkpoint_dir", dir, "--checkpoint_every", "25"});
  ASSERT_TRUE(job->on(2).WaitFor("checkpoint at clock 101 written", 1, absl::Seconds(180)))
      << job->output();
  const pid_t ps0 = WorkerPid(Marker(), 0), ps1 = WorkerPid(Marker(), 1);
  ASSERT_GT(ps0, 0) << job->output();
  ASSERT_GT(ps1, 0) << job->output();
  ASSERT_EQ(::kill(ps0, SIGKILL), 0);
  ASSERT_EQ(::kill(ps1, SIGKILL), 0);
  EXPECT_EQ(job->Finish(absl::Seconds(300)), std::vector<int>(4, 0)) << job->output();
  const std::string out = job->output();
  for (int shard : {0, 1}) {
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat("restored shard ", shard,
                                                     " of 2, which lost every replica")))
        << out;
  }
  for (int rank : {2, 3}) {
    EXPECT_FALSE(absl::StrContains(out, absl::StrCat("rank ", rank, " failed"))) << out;
  }
  EXPECT_FALSE(absl::StrContains(out, "restarting the group")) << out;
  EXPECT_TRUE(absl::StrContains(job->on(2).output(), "every replica of every shard")) << out;
  const double auc = Auc(*job);
  EXPECT_EQ(FirstNumber(job->on(3).output(), "test AUC ([0-9.]+)"), auc) << "two models\n" << out;
  EXPECT_NEAR(auc, expected, 0.005) << out;
  std::printf("undisturbed AUC %.4f; every server SIGKILLed, restored from the checkpoint: %.4f\n",
              expected, auc);
}

}  // namespace
}  // namespace tessera::testing
