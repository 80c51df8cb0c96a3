// Two-rank DDP tests over Gloo: rank 0 is the test process, rank 1 a child
// running a named scenario (tests/testing/multiprocess.h); they meet through
// a store this fixture hosts.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "collectives/gloo/gloo_process_group.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {

class TwoRankGlooTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // Starts rank 1 on `scenario` and returns rank 0's group (null on failure,
  // which is also reported).
  std::unique_ptr<collectives::ProcessGroup> Start(const std::string& scenario);
  // A check both ranks run: rank 1 as `scenario` (RunOnRank1(check)), rank
  // 0 here; both must pass.
  void RunOnBothRanks(const std::string& scenario,
                      absl::Status (*check)(collectives::ProcessGroup&));

  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::StoreClient> store_;
  std::unique_ptr<WorkerProcess> child_;
};

// A test of `fixture` (a TwoRankGlooTest) named `name` that runs `check` on
// both ranks, and rank 1's scenario for it (named fixture_name).
#define TESSERA_TWO_RANK_TEST(fixture, name, check)                                           \
  TESSERA_WORKER_SCENARIO(fixture##_##name) { return ::tessera::testing::RunOnRank1(check); } \
  TEST_F(fixture, name) { RunOnBothRanks(#fixture "_" #name, check); }

// One allreduce of ones, both ranks: OK if it sums to the world size — no
// collective of an earlier step is left half-matched. `after` names the step.
absl::Status GroupStillInStep(collectives::ProcessGroup& group, const std::string& after);

// Rank 1's side of a check both ranks run, in a scenario: joins the group
// from the environment, runs `check`, returns 0 if it passed (else prints why).
int RunOnRank1(absl::Status (*check)(collectives::ProcessGroup&));

}  // namespace tessera::testing
