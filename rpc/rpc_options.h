// Options for starting an RPC runtime.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "common/deadline_timer.h"
#include "common/executor.h"
#include "common/host_address.h"
#include "common/timeouts.h"
#include "rpc/backend_options.h"
#include "rpc/codec.h"
#include "rpc/queue_limits.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

struct RpcOptions;

// What a backend gets to make one worker's agent (RpcOptions::agent_factory):
// what the runtime resolved — who the worker is, where it listens — and the
// options as the user set them, where every setting is declared once: those
// every backend takes (job_secret, limits, max_idle_connections, queues)
// and each backend's own (tensorpipe, grpc). Nothing is copied between them.
struct AgentSetup {
  // name, rank, and incarnation (said in every handshake); the address is
  // the agent's to fill in once it listens.
  WorkerInfo self;
  HostAddress host;  // where to listen and what to advertise
  // Read while the agent is made, not kept (the agent copies what it needs).
  const RpcOptions* options = nullptr;
  RequestHandler handler;
  Executor* executor = nullptr;    // runs handlers and callbacks; outlives the agent
  DeadlineTimer* timer = nullptr;  // fires deadlines; outlives the agent
};
using AgentFactory = std::function<absl::StatusOr<std::unique_ptr<RpcAgent>>(AgentSetup setup)>;

enum class StoreRole {
  kAuto,     // rank 0 hosts the store, the others connect (like env://)
  kHost,     // this worker hosts it
  kConnect,  // the store runs elsewhere (e.g. a launcher or a test)
};

enum class Backend {
  kTensorPipe,  // the default: shared memory and cma on one host, TCP across
  kGrpc,        // HTTP/2: meshes, health probes, other languages' clients
};

// "tensorpipe" or "grpc".
absl::StatusOr<Backend> ParseBackend(const std::string& name);
const char* BackendName(Backend backend);

// How a worker enters its job (see Note [Elastic membership], rpc/runtime.h).
enum class JoinMode {
  kStart,   // with the others, at the job's rendezvous
  kRejoin,  // a new incarnation of a rank that died, into the running job
  kJoin,    // a rank beyond the initial ones (tessera-run --join hands it out)
};

struct RpcOptions {
  std::string name;  // unique worker name
  int rank = -1;
  int world_size = 0;
  // Where the rendezvous store is (MASTER_ADDR / MASTER_PORT).
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  StoreRole store_role = StoreRole::kAuto;
  // A store that is not the built-in one at master_addr:master_port, such as
  // etcd://h1:2379,h2:2379/job (store/store_url.h; TESSERA_STORE): joined,
  // never hosted. master_addr still says which network to choose an address
  // on (see Note [Choosing the host address]).
  std::string store_url;
  // Keys of this job in the store; change it to run several jobs (or
  // successive runtimes) against one long-lived store.
  std::string store_prefix = "tessera";

  // How long init waits for every worker to show up.
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  // The one default deadline of this worker's blocking calls: RPCs, RRef
  // calls and to_here(), distributed backward and optimizer steps, pipeline
  // batches — each call may override it with its CallOptions (see Note [One
  // timeout convention], rpc/call_options.h). TESSERA_TIMEOUT_S sets it from
  // the environment.
  absl::Duration default_call_timeout = DefaultTimeout();  // common/timeouts.h
  // How long a graceful shutdown waits for the other workers to arrive and
  // their calls to drain (rpc.shutdown() waits without bound; a dead worker
  // is reported by name long before this: see Note [Shutdown liveness]).
  absl::Duration shutdown_timeout = absl::Hours(24);
  // How long a call to a function not registered yet waits for it (see Note
  // [Late registration], rpc/runtime.h); never past the call's deadline.
  absl::Duration registration_wait = absl::Seconds(10);
  // Threads that run handlers and callbacks. Handlers that block in nested
  // synchronous calls hold one each; asynchronous handlers hold none.
  int num_worker_threads = 8;
  // While handlers wait for futures (a nested RpcSync), up to this many
  // threads in all, so that num_worker_threads keep running and replies can
  // still be handled (see Note [Compensating blocked pool threads]).
  int max_worker_threads = 64;
  // How long one idle worker thread polls for the next call before it
  // sleeps, while calls arrive that fast (see Note [Pool threads spin, then
  // sleep], common/thread_pool.cc); zero never polls.
  // TESSERA_WORKER_SPIN_US sets it from the environment.
  absl::Duration worker_thread_spin = absl::Microseconds(100);

  // A worker's role (e.g. "trainer"), published at rendezvous, for
  // allow-lists that name roles rather than workers (rpc/registry.h), and
  // for tessera-run --elastic_roles (which roles restart alone).
  std::string role;
  // TESSERA_JOIN=rejoin or join (tessera-run sets it when it restarts a
  // rank alone, or for tessera-run --join).
  JoinMode join = JoinMode::kStart;

  // Where this worker listens and what it advertises (see Note [Choosing the
  // host address], common/host_address.h): by default the address of the
  // interface that routes to master_addr, loopback when that is loopback.
  // The rendezvous store, when this worker hosts it, listens at master_addr.
  AddressOptions address;

  Backend backend = Backend::kTensorPipe;
  TensorPipeOptions tensorpipe;
  GrpcOptions grpc;
  // Proved by every connection before any of its requests is served
  // (rpc/auth/handshake.h). Empty: the handshake proves nothing (a warning
  // says so at start).
  auth::JobSecret job_secret;
  // Bounds on what a peer may send; the agent and the decoder both use them.
  CodecLimits limits;
  // How many outgoing connections with no call in flight a worker keeps
  // open; beyond it, the least recently used are closed — the peer is told,
  // so it is not taken for a failure — and made again on the next call
  // (see Note [Idle connections], rpc/idle_connections.h). Each costs descriptors on
  // both sides (TensorPipe: a connection per channel as well).
  // TESSERA_MAX_IDLE_CONNECTIONS sets it from the environment.
  int max_idle_connections = 128;
  // How much a worker holds of the calls it serves, and queues of the calls
  // it makes, before refusing more with RESOURCE_EXHAUSTED (see Note [Bounded
  // queues], rpc/queue_limits.h). TESSERA_MAX_REQUESTS_IN_SERVICE and
  // TESSERA_MAX_UNSENT_BYTES_PER_PEER set them from the environment.
  QueueLimits queues;
  // Where this worker writes its trace, <trace_dir>/<name>.json (see Note
  // [Tracing], common/trace.h); empty: TESSERA_TRACE's directory, if set.
  std::string trace_dir;
  // Counts calls, bytes, errors and latencies, read with Worker::metrics()
  // (see Note [Metrics], common/metrics.h). TESSERA_METRICS=1 turns them on too,
  // and prints each worker's summary line when it shuts down.
  bool metrics = false;

  // Makes the agent. Unset: rpc::Init (rpc/init.h) sets the factory of
  // `backend` (BackendFactory, rpc/init.h); the runtime core includes no backend. Tests
  // set it to run workers over a fake network whose message order they
  // control.
  AgentFactory agent_factory;

  // Fills rank, world size, master address/port from RANK, WORLD_SIZE,
  // MASTER_ADDR, MASTER_PORT (as torch's env:// does), the name from
  // TESSERA_WORKER_NAME (default "worker<rank>"), the role from
  // TESSERA_WORKER_ROLE, how it joins from TESSERA_JOIN, the backend from TESSERA_RPC_BACKEND and
  // the job secret from TESSERA_JOB_SECRET or TESSERA_JOB_SECRET_FILE, gRPC's TLS files from
  // TESSERA_TLS_* (GrpcTlsOptions::FromEnv), the queue bounds from TESSERA_MAX_*, the address from
  // TESSERA_ADDRESS, TESSERA_ADVERTISE_ADDRESS and TESSERA_SOCKET_IFNAME (TP_SOCKET_IFNAME first on
  // TensorPipe, as PyTorch's RPC reads it). Throws StatusError naming a missing or malformed
  // variable.
  static RpcOptions FromEnv();
  // The same, returning the failure.
  static absl::StatusOr<RpcOptions> TryFromEnv();
};

}  // namespace tessera::rpc
