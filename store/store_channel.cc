#include "store/store_channel.h"

#include "common/grpc_logging.h"

namespace tessera::store {
namespace {

// Note [Store connections across a cut link]: a link cut for longer than
// a call's deadline, then healed, must cost the store's clients seconds,
// not minutes. Nothing resets a connection whose packets are dropped, so
// keepalive pings notice a silent one (kKeepalive, kKeepaliveTimeout; the
// server allows pings that often, store_server.cc), and reconnection is
// retried at least every second instead of gRPC's backoff of up to two
// minutes, which after a 25 s cut left the store unreachable long after
// the link was back.
constexpr int kKeepaliveMs = 5'000;
constexpr int kKeepaliveTimeoutMs = 5'000;

}  // namespace

grpc::ChannelArguments StoreChannelArguments() {
  RouteGrpcLogging();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  return args;
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace tessera::store
