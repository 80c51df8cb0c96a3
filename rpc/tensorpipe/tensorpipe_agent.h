// Factory for the TensorPipe backend of RpcAgent (the default backend).
//
// Transports: `tcp` always, as the bootstrap — Tessera's guarded TCP
// transport (guarded_tcp/), or TensorPipe's own `uv` if asked; `shm` when
// viable on the host, preferred for peers on the same machine. Channels for tensor bytes:
// `cma` (cross-memory attach, one copy) when viable, else `basic`. The choice
// is probed at start and logged at INFO.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/executor.h"
#include "common/deadline_timer.h"
#include "rpc/auth/job_secret.h"
#include "rpc/codec.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

enum class TcpTransport {
  kGuarded,  // bounded frames, survives hostile peers (default)
  kUv,       // TensorPipe's libuv transport: trusts every peer
};

struct TensorPipeOptions {
  // Numeric address to listen on (a wildcard listens on every interface)
  // and the one peers dial; the runtime sets both by Note [Choosing the host
  // address] (common/host_address.h). An empty advertise_host is listen_host.
  std::string listen_host = "127.0.0.1";
  std::string advertise_host;
  // Allow the shared-memory transport / cma channel when viable.
  bool enable_shm = true;
  bool enable_cma = true;
  TcpTransport tcp = TcpTransport::kGuarded;
  // Set from RpcOptions::limits by the runtime.
  CodecLimits limits;
  // How long a connecting peer has to complete the handshake.
  absl::Duration handshake_timeout = absl::Seconds(10);
};

// Every pipe starts with the job-secret handshake (rpc/auth/handshake.h).
// `executor` runs handlers and future callbacks; `timer` fires deadlines.
// Both must outlive the agent.
absl::StatusOr<std::unique_ptr<RpcAgent>> CreateTensorPipeAgent(
    const TensorPipeOptions& options, const JobSecret& secret, const std::string& name, int rank,
    RequestHandler handler, Executor* executor, DeadlineTimer* timer);

}  // namespace tessera::rpc
