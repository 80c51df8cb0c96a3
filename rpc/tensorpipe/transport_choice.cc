#include "rpc/tensorpipe/transport_choice.h"

#include <tensorpipe/tensorpipe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

namespace tessera::rpc {
namespace {

namespace tp = tensorpipe;

// A listening name no other listener on this host has: the process, a
// per-process count, and the worker's name (cut so that the whole fits an
// abstract Unix socket's 107 bytes).
std::string UniqueSameHostAddress(const std::string& name) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("tessera_", getpid(), "_", counter.fetch_add(1), "_", name.substr(0, 64));
}

// Note [Same-host transport]: TensorPipe's shm transport was the same-host
// default until issue 32: its reactor thread busy-polls a core in every
// process for the whole job, which cost the parameter-server example 1.4x
// on two cores (the training needs those cores) and makes a 32-worker host
// spin 32 cores. The default is now the guarded transport on abstract Unix
// sockets (guarded_tcp.h): an epoll loop that sleeps while idle, the same
// secret gate and bounded frames as TCP (TensorPipe's shm listener let any
// local process reach TensorPipe's unguarded parsing), tensors still moved
// by the cma channel. Measured in docs/benchmarks-history.md ("Same-host
// transport"). The environment overrides the option, so a job can be
// switched without rebuilding.
SameHostTransport SameHostFromEnv(SameHostTransport configured) {
  if (const char* shm = std::getenv("TESSERA_TENSORPIPE_SHM");
      shm != nullptr && std::string(shm) == "0") {
    return SameHostTransport::kTcp;
  }
  const char* env = std::getenv("TESSERA_TENSORPIPE_SAME_HOST");
  if (env == nullptr || *env == '\0') return configured;
  const std::string value = env;
  if (value == "unix") return SameHostTransport::kUnixSockets;
  if (value == "shm") return SameHostTransport::kSharedMemory;
  if (value == "tcp") return SameHostTransport::kTcp;
  TESSERA_LOG(WARNING) << "TESSERA_TENSORPIPE_SAME_HOST=" << value
                       << " is none of unix, shm, tcp; keeping the configured transport";
  return configured;
}

}  // namespace

absl::StatusOr<RegisteredTransports> RegisterTransports(tp::Context& context,
                                                        const AgentSetup& setup) {
  const TensorPipeOptions& options = setup.options->tensorpipe;
  const auth::JobSecret& secret = setup.options->job_secret;
  // A descriptor frame is the envelope plus TensorPipe's small header.
  const size_t max_frame_bytes = setup.options->limits.max_envelope_bytes + (64 << 10);
  const std::string& listen_host = setup.host.bind;
  RegisteredTransports registered;
  registered.tcp_name = "uv";
  if (options.tcp == TcpTransport::kGuarded) {
    registered.tcp_name = "tcp";
    GuardedTcpOptions tcp_options;
    tcp_options.advertise_host = setup.host.advertise;
    tcp_options.secret = secret;
    tcp_options.connect_budget = options.handshake_timeout;
    tcp_options.max_frame_bytes = max_frame_bytes;
    context.registerTransport(0, registered.tcp_name, CreateGuardedTcpTransport(tcp_options));
  } else {
    const std::string& advertise =
        setup.host.advertise.empty() ? listen_host : setup.host.advertise;
    if (advertise != listen_host || IsWildcardAddress(listen_host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorPipe's uv transport tells peers the address it listens on, so it cannot "
          "listen on ",
          listen_host, " and advertise ", advertise,
          ": use the guarded TCP transport (the default)"));
    }
    context.registerTransport(0, registered.tcp_name, tp::transport::uv::create());
  }
  // Note [Same-host fast paths]: TensorPipe picks a same-host transport
  // (and cma) for a peer only when the peer's domain descriptor equals
  // ours — the same kernel and network namespace (and, for cma, PID and
  // user namespace). We publish ours as the worker's locality, so that
  // each worker can say which transport a peer will get before the first
  // call.
  registered.transports = registered.tcp_name;
  registered.same_host = SameHostFromEnv(options.same_host);
  if (registered.same_host == SameHostTransport::kUnixSockets) {
    GuardedTcpOptions unix_options;
    unix_options.secret = secret;
    unix_options.connect_budget = options.handshake_timeout;
    unix_options.max_frame_bytes = max_frame_bytes;
    auto unix_transport = CreateGuardedUnixTransport(unix_options);
    context.registerTransport(10, "unix", unix_transport);
    registered.locality.push_back("unix=" + unix_transport->domainDescriptor());
    registered.transports = "unix (same host), " + registered.tcp_name;
    // Without an inbox, tensors in shared memory travel as bytes.
    if (auto inbox = FdInbox::Open(); inbox.ok()) {
      registered.inbox = *std::move(inbox);
      registered.locality.push_back("fdbox=" + registered.inbox->name());
    }
  } else if (registered.same_host == SameHostTransport::kSharedMemory) {
    auto shm = tp::transport::shm::create();
    if (shm->isViable()) {
      context.registerTransport(10, "shm", shm);
      registered.locality.push_back("shm=" + shm->domainDescriptor());
      registered.transports = "shm (same host), " + registered.tcp_name;
    } else {
      registered.same_host = SameHostTransport::kTcp;
    }
  }
  context.registerChannel(0, "basic", tp::channel::basic::create());
  registered.channels = "basic";
  if (options.enable_cma && registered.same_host != SameHostTransport::kTcp) {
    auto cma = tp::channel::cma::create();
    if (cma->isViable()) {
      context.registerChannel(10, "cma", cma);
      const auto& descriptors = cma->deviceDescriptors();
      if (auto cpu = descriptors.find(tp::Device{tp::kCpuDeviceType, 0});
          cpu != descriptors.end()) {
        registered.locality.push_back("cma=" + cpu->second);
      }
      registered.channels = "cma (same host), basic";
    }
  }
  return registered;
}

std::string SameHostUrl(SameHostTransport same_host, const std::string& worker_name) {
  const std::string address = UniqueSameHostAddress(worker_name);
  return same_host == SameHostTransport::kUnixSockets ? "unix://@" + address : "shm://" + address;
}

namespace {

// The value of `key` in a locality ("key=value" entries, tab-separated).
std::string LocalityEntry(const std::string& locality, const std::string& key) {
  for (absl::string_view entry : absl::StrSplit(locality, '\t')) {
    if (absl::ConsumePrefix(&entry, key + "=")) return std::string(entry);
  }
  return std::string();
}

bool SameDomain(const WorkerInfo& self, const WorkerInfo& peer, const std::string& key) {
  const std::string mine = LocalityEntry(self.locality, key);
  return !mine.empty() && mine == LocalityEntry(peer.locality, key);
}

}  // namespace

std::string SharedMemoryInboxOf(const WorkerInfo& self, const WorkerInfo& peer) {
  if (LocalityEntry(self.locality, "fdbox").empty() || !SameDomain(self, peer, "unix")) return "";
  return LocalityEntry(peer.locality, "fdbox");
}

std::string TransportFor(const WorkerInfo& self, const WorkerInfo& peer) {
  auto same = [&](const std::string& key) { return SameDomain(self, peer, key); };
  const std::string tcp = peer.address.substr(0, peer.address.find("://"));
  const std::string transport = same("unix") ? "unix" : same("shm") ? "shm" : tcp;
  const bool same_host = transport != tcp || same("cma");
  return absl::StrCat(transport, " transport, ", same("cma") ? "cma" : "basic", " channel",
                      same_host ? " (same host)" : " (another host)");
}

}  // namespace tessera::rpc
