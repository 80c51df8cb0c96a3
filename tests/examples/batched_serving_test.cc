// The batched-serving example under tessera-run: four clients keep calls in
// flight; the server's batches mix callers, and every client gets its own
// answer for every row (each client checks all of them against the model
// run locally; a row answered with another row's or another caller's result
// counts as wrong).
//
// Each client keeps 8 calls in flight and a batch holds up to 16, so no
// client can fill a batch alone: a full batch mixes callers by construction,
// and a batch of one caller only leaves on the delay. With more in flight
// than a batch holds, batching by arrival can settle into a convoy in which
// each batch is one client's burst (answered together, resent together,
// arriving before the next client's): correct, but no batch mixes callers.
// CI saw exactly that once, 100 batches of 16 from one caller each.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(BatchedServingExampleTest, EveryCallerGetsItsOwnAnswerFromMixedBatches) {
  Launcher launcher({"--nproc_per_node", "5", "--standalone",
                     "examples/batched_serving/batched_serving", "--requests", "400", "--in_flight",
                     "8", "--max_batch", "16"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(300)), 0) << launcher.output();
  const std::string& out = launcher.output();
  for (const char* client : {"client1", "client2", "client3", "client4"}) {
    for (const char* phase : {"unbatched", "batched"}) {
      EXPECT_NE(out.find(std::string("[") + client + "] " + phase + ": 400 calls, 0 wrong answers"),
                std::string::npos)
          << client << " " << phase << "\n"
          << out;
    }
  }
  std::smatch stats;
  ASSERT_TRUE(std::regex_search(
      out, stats,
      std::regex("batched: (\\d+) batches, [0-9.]+ calls a batch on average \\(largest (\\d+)\\), "
                 "(\\d+) batches mixed callers")))
      << out;
  const int batches = std::atoi(stats[1].str().c_str());
  EXPECT_LT(batches, 1600) << "some calls must have shared a batch\n" << out;
  EXPECT_LE(std::atoi(stats[2].str().c_str()), 16) << out;
  EXPECT_GT(std::atoi(stats[3].str().c_str()), 0) << "no batch mixed callers\n" << out;
  EXPECT_NE(out.find("[server] wrong answers: 0"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing
