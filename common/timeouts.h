// The one default deadline of Tessera's blocking calls (README, "Timeouts").
//
// RpcOptions::default_call_timeout starts from it (and RPCs, RRef calls and
// to_here(), distributed backward and optimizer steps, and pipeline batches
// inherit that), and the `timeout` fields of GlooOptions, NcclOptions,
// DdpOptions, SyncBatchNormOptions and ZeroOptions, left zero, resolve to it
// — so one setting changes them all; each call or option may still set its
// own (see Note [One timeout convention], rpc/call_options.h).
#pragma once

#include "absl/time/time.h"

namespace tessera {

inline constexpr absl::Duration kBuiltinDefaultTimeout = absl::Seconds(60);

// TESSERA_TIMEOUT_S (seconds, fractions allowed, > 0) when set and valid
// (an invalid value is logged and ignored), else 60 s.
absl::Duration DefaultTimeout();

// An options field or argument's timeout, with zero meaning "the default"
// (README, "Timeouts"): `timeout` if positive, else `default_timeout`.
inline absl::Duration OrDefault(absl::Duration timeout, absl::Duration default_timeout) {
  return timeout > absl::ZeroDuration() ? timeout : default_timeout;
}

// `options` with its `timeout` field resolved: zero becomes DefaultTimeout().
template <typename Options>
Options WithDefaultTimeout(Options options) {
  options.timeout = OrDefault(options.timeout, DefaultTimeout());
  return options;
}

}  // namespace tessera
