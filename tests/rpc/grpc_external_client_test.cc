// The gRPC agent seen from outside: Debian's python3-grpcio, with code
// generated from the public protos by protoc, probes a worker's standard
// health service and server reflection, runs the handshake, calls a
// registered function, and is
// refused when it replays a handshake, has the wrong secret, skips the
// handshake or sends garbage (tests/rpc/python/external_client.py). The
// worker serves on afterwards.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

class GrpcExternalClientTest : public RpcWorld {};

int RunShell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(GrpcExternalClientTest, PythonClientProbesHealthCallsAndIsRefusedWhenItShouldBe) {
  StartWorld(2);
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string generated = absl::StrCat(tmp, "/generated");
  ASSERT_EQ(RunShell("mkdir -p " + generated), 0);
  ASSERT_EQ(RunShell("protoc -I. --python_out=" + generated +
                " proto/rpc.proto proto/worker_service.proto tests/rpc/python/health.proto"
                " tests/rpc/python/reflection.proto"),
            0);
  // The secret travels in the environment, never on a command line.
  ASSERT_EQ(setenv("TESSERA_JOB_SECRET", TestJobSecret().value().c_str(), 1), 0);
  const int exit_code = RunShell("timeout 120 /usr/bin/python3 tests/rpc/python/external_client.py " +
                            rt().workers()[1].address + " " + generated);
  unsetenv("TESSERA_JOB_SECRET");
  EXPECT_EQ(exit_code, 0) << "see the client's output above";
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{21}), 21);
}

}  // namespace
}  // namespace tessera::testing
