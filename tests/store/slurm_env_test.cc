// Slurm's compressed host lists, as SLURM_JOB_NODELIST writes them.
#include "store/slurm_env.h"

#include <gtest/gtest.h>

namespace tessera::store {
namespace {

TEST(SlurmEnvTest, TheFirstHostOfACompressedList) {
  EXPECT_EQ(FirstHostOfNodeList("node[01-04,07],gpu5").value(), "node01");
  EXPECT_EQ(FirstHostOfNodeList("node[7,9-10]").value(), "node7");
  EXPECT_EQ(FirstHostOfNodeList("rack[2-3]-n[5-6]").value(), "rack2-n5");
  EXPECT_EQ(FirstHostOfNodeList("login1,login2").value(), "login1");
  EXPECT_EQ(FirstHostOfNodeList("single").value(), "single");
}

TEST(SlurmEnvTest, AMalformedListIsAnError) {
  EXPECT_FALSE(FirstHostOfNodeList("node[01-04").ok());
  EXPECT_FALSE(FirstHostOfNodeList("node[]").ok());
  EXPECT_FALSE(FirstHostOfNodeList("").ok());
}

}  // namespace
}  // namespace tessera::store
