#include "rpc/rpc_options.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "store/rendezvous_env.h"

namespace tessera::rpc {

absl::StatusOr<Backend> ParseBackend(const std::string& name) {
  if (name == "tensorpipe") return Backend::kTensorPipe;
  if (name == "grpc") return Backend::kGrpc;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown RPC backend '", name, "' (expected tensorpipe or grpc)"));
}

const char* BackendName(Backend backend) {
  return backend == Backend::kGrpc ? "grpc" : "tensorpipe";
}

namespace {

// Sets `*out` from the count in environment variable `name`, if set.
template <typename Count>
absl::Status ReadCount(const char* name, Count min, Count* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtoi(text, out) || *out < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is '", text, "' (expected a count, ", min, " or more)"));
  }
  return absl::OkStatus();
}

}  // namespace

RpcOptions RpcOptions::FromEnv() { return ValueOrThrow(TryFromEnv()); }

absl::StatusOr<RpcOptions> RpcOptions::TryFromEnv() {
  RpcOptions options;
  TESSERA_ASSIGN_OR_RETURN(auto env, store::ReadRendezvousEnv());
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.master_addr = env.master_addr;
  options.master_port = env.master_port;
  // Under tessera-run the launcher hosts the store; workers connect to it.
  if (env.store_hosted) options.store_role = StoreRole::kConnect;
  options.store_url = env.store_url;
  if (env.rendezvous_timeout.has_value()) options.rendezvous_timeout = *env.rendezvous_timeout;
  const char* name = std::getenv("TESSERA_WORKER_NAME");
  options.name = name ? name : absl::StrCat("worker", options.rank);
  if (const char* role = std::getenv("TESSERA_WORKER_ROLE")) options.role = role;
  if (const char* join = std::getenv("TESSERA_JOIN"); join != nullptr && *join != '\0') {
    const std::string mode = join;
    if (mode != "rejoin" && mode != "join" && mode != "start") {
      return absl::InvalidArgumentError("TESSERA_JOIN is '" + mode +
                                        "' (expected start, rejoin or join)");
    }
    options.join = mode == "rejoin" ? JoinMode::kRejoin
                   : mode == "join" ? JoinMode::kJoin
                                    : JoinMode::kStart;
  }
  if (const char* backend = std::getenv("TESSERA_RPC_BACKEND")) {
    auto parsed = ParseBackend(backend);
    if (!parsed.ok()) return Annotate(parsed.status(), "TESSERA_RPC_BACKEND");
    options.backend = *parsed;
  }
  options.address = AddressOptions::FromEnv(
      options.backend == Backend::kTensorPipe ? "TP_SOCKET_IFNAME" : nullptr);
  TESSERA_RETURN_IF_ERROR(ReadCount("TESSERA_MAX_IDLE_CONNECTIONS", 0, &options.max_idle_connections));
  TESSERA_RETURN_IF_ERROR(ReadCount("TESSERA_MAX_REQUESTS_IN_SERVICE", 1,
                                    &options.queues.max_requests_in_service));
  TESSERA_RETURN_IF_ERROR(ReadCount("TESSERA_MAX_UNSENT_BYTES_PER_PEER", uint64_t{1},
                                    &options.queues.max_unsent_bytes_per_peer));
  int64_t spin_us = absl::ToInt64Microseconds(options.worker_thread_spin);
  TESSERA_RETURN_IF_ERROR(ReadCount("TESSERA_WORKER_SPIN_US", int64_t{0}, &spin_us));
  options.worker_thread_spin = absl::Microseconds(spin_us);
  if (const char* seconds = std::getenv("TESSERA_HANDSHAKE_TIMEOUT_S")) {
    int parsed = 0;
    if (!absl::SimpleAtoi(seconds, &parsed) || parsed <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TESSERA_HANDSHAKE_TIMEOUT_S is '", seconds, "' (expected a number of seconds, 1 or more)"));
    }
    options.tensorpipe.handshake_timeout = absl::Seconds(parsed);
    options.grpc.handshake_timeout = absl::Seconds(parsed);
  }
  options.grpc.tls = GrpcTlsOptions::FromEnv();
  const char* reflection = std::getenv("TESSERA_GRPC_REFLECTION");
  options.grpc.reflection = reflection != nullptr && std::string(reflection) == "1";
  TESSERA_ASSIGN_OR_RETURN(auto secret, auth::JobSecret::FromEnv());
  options.job_secret = std::move(secret);
  return options;
}

}  // namespace tessera::rpc
