// The send/recv collectives example under tessera-run with three ranks (an
// odd count: uneven ring chunks, a broadcast tree with a missing branch):
// the tree broadcast equals the built-in broadcast and the ring all-reduce
// the built-in all-reduce on every rank, for every size.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing/launcher_process.h"

namespace tessera::testing {
namespace {

TEST(SendRecvCollectivesExampleTest, MatchTheBuiltInCollectives) {
  Launcher launcher({"--nproc_per_node", "3", "--standalone",
                     "examples/send_recv_collectives/send_recv_collectives"});
  ASSERT_EQ(launcher.Finish(absl::Seconds(300)), 0) << launcher.output();
  const std::string& out = launcher.output();
  EXPECT_NE(out.find("every rank's results match the built-in collectives: yes"), std::string::npos)
      << out;
  EXPECT_EQ(out.find(" NO"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing
