// The sharded parameter server at the size of a real job's trainer count:
// 64 trainers (the test process and 63 children) push a counting table
// held by 4 servers, all on this host; every count equals the pushes made.
#include <gtest/gtest.h>

#include "tests/ps/ps_world.h"

namespace tessera::testing {
namespace {

class PsScaleTest : public PsWorld {};

TEST_F(PsScaleTest, SixtyFourTrainersAgainstFourServersCountEveryPushOnce) {
  StartPs(4, 63, "count");
  ExpectCountsOfEveryPush();
}

}  // namespace
}  // namespace tessera::testing
