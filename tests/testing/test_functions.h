// The functions every worker of the RPC tests registers.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "rpc/registry.h"
#include "rpc/rpc_options.h"

namespace tessera::testing {

// echo(Any) -> Any; add(Tensor, Tensor) -> Tensor; fail(str) throws;
// block(str key) -> bool: sets "<key>/started" in the store, then waits for
// `key` until the call's deadline; nested(List[str], Tensor) -> Tensor calls
// the first worker of the list synchronously (+1 per hop); async_nested the
// same without holding a thread; async_add(Tensor, Tensor) completes on
// another thread; describe(Tensor, int, float, bool, str, List[int],
// Dict[str, float]) -> str.
rpc::Registry MakeTestRegistry();

// What "block" runs: sets "<key>/started" in the store, then waits for `key`
// until 2 s past the call's deadline (its caller gives up first); true if
// it came.
bool BlockUntilReleased(rpc::CallContext& ctx, const std::string& key);

// How long a test's workers wait for one another to start. Minutes, not
// the product's 60 s: CI starts 16 sanitizer-built workers at once on 2
// cores, and at a load of 16 the last of them took longer than a minute
// to load its libraries (stop 69). Tests of a rank that never comes set
// their own.
inline constexpr absl::Duration kTestRendezvousTimeout = absl::Minutes(5);

// Options for a test worker from the environment (see WorkerEnv), with
// timeouts suited to tests (TESSERA_TEST_SHUTDOWN_TIMEOUT_S and
// TESSERA_TEST_REGISTRATION_WAIT_S set two of them).
rpc::RpcOptions TestWorkerOptions();

// Options for a worker in this process that meets the others through a store
// the test hosts on `store_port` (within kTestRendezvousTimeout).
rpc::RpcOptions InProcessOptions(const std::string& name, int rank, int world_size,
                                 int store_port);

}  // namespace tessera::testing
