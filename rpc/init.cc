#include "rpc/init.h"

#include "common/descriptor_limit.h"
#include "common/status.h"
#include "rpc/grpc/grpc_agent.h"
#include "rpc/tensorpipe/tensorpipe_agent.h"

namespace tessera::rpc {
AgentFactory BackendFactory(Backend backend) {
  if (backend == Backend::kGrpc) return CreateGrpcAgent;
  return CreateTensorPipeAgent;
}

absl::StatusOr<std::unique_ptr<Runtime>> TryInit(
    RpcOptions options, Registry registry,
    std::vector<std::shared_ptr<RuntimeExtension>> extensions) {
  RaiseDescriptorLimit();
  if (!options.agent_factory) {
    // Before the store client, this process's first use of gRPC.
    if (options.backend == Backend::kGrpc) PrepareProcessForGrpcAgent();
    options.agent_factory = BackendFactory(options.backend);
  }
  return Runtime::Create(std::move(options), std::move(registry), std::move(extensions));
}

std::unique_ptr<Runtime> Init(RpcOptions options, Registry registry,
                              std::vector<std::shared_ptr<RuntimeExtension>> extensions) {
  return ValueOrThrow(TryInit(std::move(options), std::move(registry), std::move(extensions)));
}

}  // namespace tessera::rpc
