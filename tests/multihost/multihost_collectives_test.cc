// Collectives across separate network hosts with shared memory within each
// (collectives/shm/, see Note [Hierarchical collectives]): 2 hosts x 2 ranks. Every rank
// runs the conformance suite on the hierarchical group, then checks it
// against a flat Gloo group of the same ranks: integer sums, broadcasts and
// allgathers equal, floating sums equal to rounding; also with hosts of
// unequal rank counts (2 + 1). Then a host's leader is SIGKILLed mid-job:
// every other rank fails at once, naming it.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
#include "tests/collectives/process_group_conformance.h"
#include "tests/multihost/job.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {
namespace {

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError("differs from flat Gloo: " + what);
}

// The same collectives on both groups must agree.
absl::Status AgreesWithFlatGloo(collectives::ProcessGroup& hierarchical,
                                collectives::ProcessGroup& flat) {
  const int r = hierarchical.rank();
  const int n = hierarchical.size();
  for (int64_t numel : {int64_t{3001}, (int64_t{1} << 21) + 7}) {
    const at::Tensor ints =
        (at::arange(numel, at::kLong) * (7919 * r + 104729)).remainder(2000003) - 1000001;
    const at::Tensor floats = at::sin(at::arange(numel, at::kFloat) * (0.37f * (r + 1))) * 1000.0f;
    for (const at::Tensor& values : {ints, floats}) {
      at::Tensor a = values.clone(), b = values.clone();
      TESSERA_RETURN_IF_ERROR(Done(hierarchical.Allreduce(a)));
      TESSERA_RETURN_IF_ERROR(Done(flat.Allreduce(b)));
      const bool same = values.is_floating_point() ? at::allclose(a, b, 1e-5, 1e-2) : at::equal(a, b);
      TESSERA_RETURN_IF_ERROR(Expect(same, absl::StrCat("sum of ", numel, " ", std::string(values.dtype().name()))));
    }
    // From a rank on the other host than rank 0's.
    at::Tensor a = r == n - 1 ? floats.clone() : at::zeros({numel});
    at::Tensor b = a.clone();
    TESSERA_RETURN_IF_ERROR(Done(hierarchical.Broadcast(a, n - 1)));
    TESSERA_RETURN_IF_ERROR(Done(flat.Broadcast(b, n - 1)));
    TESSERA_RETURN_IF_ERROR(Expect(at::equal(a, b), absl::StrCat("broadcast of ", numel)));
    at::Tensor all_a = at::zeros({n * numel}, at::kLong), all_b = all_a.clone();
    TESSERA_RETURN_IF_ERROR(Done(hierarchical.Allgather(ints, all_a)));
    TESSERA_RETURN_IF_ERROR(Done(flat.Allgather(ints, all_b)));
    TESSERA_RETURN_IF_ERROR(Expect(at::equal(all_a, all_b), absl::StrCat("allgather of ", numel)));
  }
  return absl::OkStatus();
}

TESSERA_WORKER_SCENARIO(hierarchical_collectives) {
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  collectives::GlooOptions flat_options;
  flat_options.shm.enabled = false;
  flat_options.store_prefix = "tessera/gloo-flat";
  auto flat = collectives::CreateGlooProcessGroup(env.store.get(), env.group->rank(),
                                                  env.group->size(), flat_options);
  absl::Status status = RunConformance(*env.group);
  if (status.ok()) status = AgreesWithFlatGloo(*env.group, *flat);
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", env.group->rank(), status.ToString().c_str());
    return 1;
  }
  std::printf("hierarchical rank %d of %d agrees with flat Gloo\n", env.group->rank(),
              env.group->size());
  return 0;
}

TEST(MultiHostCollectivesTest, TwoHostsOfTwoRanksReduceThroughSharedMemoryAndLeaders) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Launched(hosts, 2, {SelfPath(), "--tessera_worker=hierarchical_collectives"});
  EXPECT_EQ(job->Finish(), std::vector<int>(2, 0)) << job->output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        job->output(), absl::StrCat("hierarchical rank ", rank, " of 4 agrees with flat Gloo")))
        << job->output();
  }
  // Each network host is a host of its own: two hosts of two ranks.
  EXPECT_TRUE(absl::StrContains(job->on(0).output(),
                                "collectives through shared memory: 4 ranks on 2 host(s)"))
      << job->output();
}

// Hosts of unequal rank counts: two ranks on host 0, one on host 1 (alone
// there: a leader with no shared memory), started directly. Allgather
// takes the flat group then (see Note [Hierarchical collectives]); the rest
// goes through the hierarchy.
// The environment of ranks a test's shell starts itself on each host (no
// launcher): host h's first rank is BASE_RANK = 2h; rank 0 hosts the store.
std::function<Env(int, const std::string&)> RanksStartedDirectly(NetworkHosts& hosts,
                                                                 int world_size) {
  return [&hosts, world_size](int host, const std::string& port) {
    return Env{{"MASTER_ADDR", hosts.address(0)},
               {"MASTER_PORT", port},
               {"WORLD_SIZE", std::to_string(world_size)},
               {"BASE_RANK", std::to_string(2 * host)}};
  };
}

// A shell command for one host that starts the ranks BASE_RANK ..
// BASE_RANK + `ranks` - 1 of `scenario` (the test binary is $0), waits for
// each and prints "rank R exited with C": the test checks every rank's exit
// code, which the host's shell alone would not tell.
std::string StartRanks(const std::string& scenario, const std::string& ranks) {
  return absl::StrCat("n=", ranks, "; for i in $(seq 0 $((n - 1))); do RANK=$((BASE_RANK + i)) ",
                      "\"$0\" --tessera_worker=", scenario, " & eval pid$i=$!; done; ",
                      "for i in $(seq 0 $((n - 1))); do eval wait \\$pid$i; ",
                      "echo \"rank $((BASE_RANK + i)) exited with $?\"; done");
}

void ExpectExitCode(const std::string& out, int rank, int code) {
  EXPECT_TRUE(absl::StrContains(out, absl::StrCat("rank ", rank, " exited with ", code, "\n")))
      << "rank " << rank << " should have exited with " << code << "\n"
      << out;
}

TEST(MultiHostCollectivesTest, HostsOfUnequalRankCountsAgreeWithFlatGloo) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Direct(
      hosts,
      {"/bin/sh", "-c",
       StartRanks("hierarchical_collectives", "$([ \"$BASE_RANK\" = 0 ] && echo 2 || echo 1)"),
       SelfPath()},
      RanksStartedDirectly(hosts, 3));
  EXPECT_EQ(job->Finish(), std::vector<int>(2, 0)) << job->output();
  const std::string out = job->output();
  for (int rank = 0; rank < 3; ++rank) {
    ExpectExitCode(out, rank, 0);
    EXPECT_TRUE(absl::StrContains(
        out, absl::StrCat("hierarchical rank ", rank, " of 3 agrees with flat Gloo")))
        << out;
  }
  EXPECT_TRUE(absl::StrContains(out, "collectives through shared memory: 3 ranks on 2 host(s)"))
      << out;
}

// The collective timeout of the killed-rank test: a failure that waited for
// it would be DEADLINE_EXCEEDED; the dead rank must be seen as UNAVAILABLE.
constexpr absl::Duration kKillTimeout = absl::Seconds(60);

// Allreduces until one fails; rank 2 (the second host's leader) SIGKILLs
// itself after 20. Prints why the failing allreduce failed, then stays
// until every survivor has failed.
TESSERA_WORKER_SCENARIO(hierarchical_rank_dies) {
  collectives::GlooOptions options;
  options.timeout = kKillTimeout;
  auto env = collectives::CreateGlooProcessGroupFromEnv(options);
  const int rank = env.group->rank();
  at::Tensor values = at::ones({1000});
  for (int i = 0; i < 100000; ++i) {
    if (rank == 2 && i == 20) ::raise(SIGKILL);
    auto done = env.group->Allreduce(values).Wait(2 * kKillTimeout);
    if (!done.ok()) {
      std::printf("rank %d failed: %s\n", rank, done.status().ToString().c_str());
      std::fflush(stdout);
      // Alive until every survivor has failed: a rank that failed must tell
      // its host's others so, not merely exit (which they would see too).
      (void)env.store->Set(absl::StrCat("dies/failed/", rank), "");
      (void)env.store->Wait({"dies/failed/0", "dies/failed/1", "dies/failed/3"}, 2 * kKillTimeout);
      return 0;
    }
  }
  return 1;
}

// Two processes per host started directly (no launcher, which would stop
// the host's other rank itself); rank 2, the leader of host 1, is killed
// between two allreduces. Rank 3 (its host) names it from its liveness
// lock; rank 0 (the other leader) fails in Gloo's step with it; rank 1
// learns from rank 0's broken mark: none of them waits for the timeout.
TEST(MultiHostCollectivesTest, AKilledLeaderFailsEveryOtherRankAtOnce) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  const std::string self = SelfPath();
  auto job = Job::Direct(hosts, {"/bin/sh", "-c", StartRanks("hierarchical_rank_dies", "2"), self},
                         RanksStartedDirectly(hosts, 4));
  EXPECT_EQ(job->Finish(), std::vector<int>(2, 0)) << job->output();
  const std::string out = job->output();
  // The survivors saw the failure and ended as planned; rank 2 was killed.
  for (int rank : {0, 1, 3}) ExpectExitCode(out, rank, 0);
  ExpectExitCode(out, 2, 128 + SIGKILL);
  // UNAVAILABLE: seen (a lost liveness lock, a broken connection, a broken
  // mark), not waited out (DEADLINE_EXCEEDED at the timeout).
  for (int rank : {0, 1, 3}) {
    EXPECT_TRUE(std::regex_search(out, std::regex(absl::StrCat("rank ", rank,
                                                               " failed: UNAVAILABLE"))))
        << out;
  }
  EXPECT_FALSE(absl::StrContains(out, "rank 2 failed")) << out;
  EXPECT_FALSE(absl::StrContains(out, "DEADLINE_EXCEEDED")) << out;
  // Rank 3, on the killed rank's host: named from its liveness lock.
  EXPECT_TRUE(std::regex_search(
      out, std::regex("rank 3 failed: UNAVAILABLE[^\\n]*rank 2 \\(local rank 0, pid \\d+\\) exited or "
                      "was killed")))
      << out;
  // Rank 1: its leader's broken mark, not a timeout.
  EXPECT_TRUE(std::regex_search(
      out, std::regex("rank 1 failed: UNAVAILABLE[^\\n]*rank 0 \\(local rank 0, pid \\d+\\) failed")))
      << out;
}

}  // namespace
}  // namespace tessera::testing
