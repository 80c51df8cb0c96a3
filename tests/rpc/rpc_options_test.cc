// RpcOptions::TryFromEnv: the counts a user sets through the environment
// are parsed with a clear error naming the variable and what it expected,
// never silently turned into a default (TESSERA_WORKER_SPIN_US once was,
// in the benchmarks: a typo switched the pool's polling off).
#include "rpc/rpc_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace tessera::rpc {
namespace {

class RpcOptionsFromEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("MASTER_PORT", "29500", 1);
  }
  void TearDown() override {
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_PORT", "TESSERA_WORKER_SPIN_US",
                             "TESSERA_MAX_REQUESTS_IN_SERVICE", "TESSERA_RDZV_TIMEOUT_S"}) {
      unsetenv(name);
    }
  }
};

TEST_F(RpcOptionsFromEnvTest, TheWorkerSpinIsMicrosecondsAndZeroTurnsItOff) {
  auto defaults = RpcOptions::TryFromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->worker_thread_spin, RpcOptions().worker_thread_spin);
  setenv("TESSERA_WORKER_SPIN_US", "250", 1);
  auto set = RpcOptions::TryFromEnv();
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->worker_thread_spin, absl::Microseconds(250));
  setenv("TESSERA_WORKER_SPIN_US", "0", 1);
  auto off = RpcOptions::TryFromEnv();
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->worker_thread_spin, absl::ZeroDuration());
}

TEST_F(RpcOptionsFromEnvTest, ABadCountIsAnErrorNamingTheVariable) {
  for (const char* bad : {"abc", "-1", "12us", ""}) {
    setenv("TESSERA_WORKER_SPIN_US", bad, 1);
    auto options = RpcOptions::TryFromEnv();
    ASSERT_FALSE(options.ok()) << "'" << bad << "' was taken";
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(options.status().message()),
              "TESSERA_WORKER_SPIN_US is '" + std::string(bad) + "' (expected a count, 0 or more)");
  }
  unsetenv("TESSERA_WORKER_SPIN_US");
  setenv("TESSERA_MAX_REQUESTS_IN_SERVICE", "0", 1);
  auto options = RpcOptions::TryFromEnv();
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("TESSERA_MAX_REQUESTS_IN_SERVICE is '0' (expected a "
                                            "count, 1 or more)"),
            std::string::npos)
      << options.status();
}

// tessera-run hands its --rdzv_timeout to the workers (see Note [Slow is not
// failed], store/store_backend.h): their rendezvous and the store's answers
// get the job's budget, not the worker's default.
TEST_F(RpcOptionsFromEnvTest, TheJobsRendezvousBudgetReachesTheWorker) {
  auto defaults = RpcOptions::TryFromEnv();
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->rendezvous_timeout, RpcOptions().rendezvous_timeout);
  setenv("TESSERA_RDZV_TIMEOUT_S", "900", 1);
  auto set = RpcOptions::TryFromEnv();
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->rendezvous_timeout, absl::Seconds(900));
  for (const char* bad : {"0", "ten"}) {
    setenv("TESSERA_RDZV_TIMEOUT_S", bad, 1);
    auto options = RpcOptions::TryFromEnv();
    ASSERT_FALSE(options.ok()) << "'" << bad << "' was taken";
    EXPECT_NE(options.status().message().find("TESSERA_RDZV_TIMEOUT_S"), std::string::npos)
        << options.status();
  }
}

}  // namespace
}  // namespace tessera::rpc
