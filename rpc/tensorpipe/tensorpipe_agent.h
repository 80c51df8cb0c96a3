// Factory for the TensorPipe backend of RpcAgent (the default backend).
//
// Transports: `tcp` always, as the bootstrap and between hosts — Tessera's
// guarded TCP transport (guarded_tcp/), or TensorPipe's own `uv` if asked;
// for peers on the same machine the one TensorPipeOptions::same_host picks
// (by default the guarded transport on Unix sockets, which sleeps while
// idle: see Note [Same-host transport], transport_choice.cc). Channels for
// tensor bytes: `cma` (cross-memory attach, one copy) between workers of
// one host when viable, else `basic`. The choice is probed at start and
// logged at INFO. The agent itself: tensorpipe_agent_impl.h.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"

namespace tessera::rpc {

// Every pipe starts with the job-secret handshake (rpc/auth/handshake.h).
// `setup.executor` runs handlers and future callbacks; `setup.timer` fires
// deadlines. Both must outlive the agent.
absl::StatusOr<std::unique_ptr<RpcAgent>> CreateTensorPipeAgent(AgentSetup setup);

}  // namespace tessera::rpc
