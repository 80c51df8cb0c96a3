// Authorization, for every RPC backend: allow-lists on registered functions
// (rpc/allow_list.h), by worker name and by role.
#include <gtest/gtest.h>

#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

class AuthzTest : public RpcWorld {};

// restricted_echo allows worker1 (by name) and role "trusted". worker0 has
// no role; worker2 runs with role "trusted".
TEST_F(AuthzTest, AllowListsAdmitNamesAndRolesAndDenyTheRest) {
  StartWorld(3, {{"TESSERA_WORKER_ROLE", "trusted"}});

  auto denied = rt().RpcAsync<int64_t>("worker1", "restricted_echo", int64_t{1})
                    .Wait(absl::Seconds(60));
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_NE(denied.status().message().find("permission denied"), std::string::npos);
  EXPECT_NE(denied.status().message().find("'restricted_echo'"), std::string::npos);
  EXPECT_NE(denied.status().message().find("'worker0'"), std::string::npos);

  // Checked before the arguments are decoded: a wrong argument type still
  // gets "permission denied", not a signature mismatch that would reveal it.
  auto wrong_type = rt().RpcAsync<int64_t>("worker1", "restricted_echo", std::string("x"))
                        .Wait(absl::Seconds(60));
  EXPECT_EQ(wrong_type.status().code(), absl::StatusCode::kPermissionDenied)
      << wrong_type.status();

  // worker2 by role, worker1 by name (calling itself through the transport).
  EXPECT_EQ(rt().RpcSync<int64_t>("worker2", "relay_restricted_echo", std::string("worker1"),
                                  int64_t{7}),
            7);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "relay_restricted_echo", std::string("worker1"),
                                  int64_t{8}),
            8);
  // Functions without a list stay open to every worker.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{9}), 9);
}

}  // namespace
}  // namespace tessera::testing
