// CallOptions: what one call may set for itself — today its deadline.
//
// Note [One timeout convention] (README, "Timeouts"): a deadline is given in
// one of two places, and in both zero means "the default".
// - Per call, as a CallOptions: first in RpcSync/RpcAsync (worker, runtime
//   or RRef; the remote function's arguments follow), last everywhere else
//   (to_here, Backward, the DistributedOptimizer's calls). An absl::Duration
//   converts to it, so `rref.to_here(absl::Seconds(5))` reads as it should.
//   The default is the runtime's RpcOptions::default_call_timeout.
// - Per component, as the `timeout` field of its options (PipelineOptions,
//   DdpOptions, GlooOptions, NcclOptions, SyncBatchNormOptions,
//   ZeroOptions, QuorumOptions). The default is the runtime's for
//   parts that call through it (the pipeline), else DefaultTimeout()
//   (common/timeouts.h), QuorumOptions its own 5 s.
// Durations named for one phase (rendezvous_timeout, connect_timeout,
// shutdown_timeout, handshake_timeout) hold their default value itself.
// A blocking call waits for its future with AwaitCall (common/await_call.h).
#pragma once

#include <type_traits>

#include "absl/time/time.h"

namespace tessera::rpc {

struct CallOptions {
  CallOptions() = default;
  // Implicit on purpose: where a call takes CallOptions, a Duration is its
  // timeout.
  CallOptions(absl::Duration timeout) : timeout(timeout) {}  // NOLINT(runtime/explicit)

  // Zero means "the runtime's default_call_timeout".
  absl::Duration timeout = absl::ZeroDuration();
};

// True when a call's first argument is its options (or a Duration standing
// for them) rather than its target.
template <typename T>
inline constexpr bool kIsCallOptions = std::is_convertible_v<std::decay_t<T>, CallOptions>;

}  // namespace tessera::rpc
