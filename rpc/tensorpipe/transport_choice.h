// Which transports and channels a TensorPipe agent's context offers, and
// which of them a peer will get (see Note [Same-host fast paths], see Note
// [Same-host transport]). Internal to rpc/tensorpipe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/job_secret.h"
#include "rpc/backend_options.h"
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"
#include "rpc/tensorpipe/fd_inbox.h"

namespace tensorpipe {
class Context;
}  // namespace tensorpipe

namespace tessera::rpc {

struct RegisteredTransports {
  std::string tcp_name;  // "tcp" (guarded) or "uv": the scheme of the worker's address
  // The same-host transport registered (kTcp: none).
  SameHostTransport same_host = SameHostTransport::kTcp;
  // "key=domain descriptor" entries, published as the worker's locality.
  std::vector<std::string> locality;
  std::string transports;  // for the start-up log line
  std::string channels;
  // With the Unix-socket transport: the inbox through which peers on this
  // host hand over tensors in shared memory (see Note [Descriptor inbox]),
  // published in the locality as "fdbox=NAME".
  std::unique_ptr<FdInbox> inbox;
};

// Registers the cross-host transport, the same-host one the TensorPipe
// options (or TESSERA_TENSORPIPE_SAME_HOST / TESSERA_TENSORPIPE_SHM) ask for
// where viable, and the channels, for the agent `setup` makes.
// InvalidArgument for options the uv transport cannot honour.
absl::StatusOr<RegisteredTransports> RegisterTransports(tensorpipe::Context& context,
                                                        const AgentSetup& setup);

// A fresh listening URL for the same-host transport `same_host` (not kTcp),
// unique on this host.
std::string SameHostUrl(SameHostTransport same_host, const std::string& worker_name);

// The inbox name `peer` publishes, if tensors in shared memory can go to it
// from `self` as handles: both on the Unix-socket transport of one host
// (see Note [Tensors in shared memory]); else "".
std::string SharedMemoryInboxOf(const WorkerInfo& self, const WorkerInfo& peer);

// Which transport and channel TensorPipe will choose for `peer`, by the
// rule (see Note [Same-host fast paths]): for log lines.
std::string TransportFor(const WorkerInfo& self, const WorkerInfo& peer);

}  // namespace tessera::rpc
