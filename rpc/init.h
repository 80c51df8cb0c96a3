// rpc::Init: starts an RPC runtime on the backend its options name — the
// C++ counterpart of torch.distributed.rpc.init_rpc. The one place that
// knows both backends (the runtime core, rpc/runtime.h, includes neither:
// it makes its agent through RpcOptions::agent_factory).
//
//   auto runtime = rpc::Init(rpc::RpcOptions::FromEnv());
//
// Programs with RRefs and distributed autograd start a tessera::Worker
// (tessera/worker.h), which calls this.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/registry.h"
#include "rpc/rpc_options.h"
#include "rpc/runtime.h"
#include "rpc/runtime_extension.h"

namespace tessera::rpc {

// The factory of `backend`'s agents (TensorPipe or gRPC).
AgentFactory BackendFactory(Backend backend);

// Starts the runtime (Runtime::Create) with options.agent_factory, or the
// factory of options.backend when that is unset. Throws StatusError naming
// what failed.
std::unique_ptr<Runtime> Init(RpcOptions options, Registry registry = {},
                              std::vector<std::shared_ptr<RuntimeExtension>> extensions = {});
// The same, returning the failure (for callers that branch on it).
absl::StatusOr<std::unique_ptr<Runtime>> TryInit(
    RpcOptions options, Registry registry = {},
    std::vector<std::shared_ptr<RuntimeExtension>> extensions = {});

}  // namespace tessera::rpc
