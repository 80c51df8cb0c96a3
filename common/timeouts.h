// The one default deadline of Tessera's blocking calls (README, "Timeouts").
//
// Every options struct with a timeout takes this as its default —
// RpcOptions::default_call_timeout (which RPCs, RRef calls and to_here(),
// distributed backward and optimizer steps, and pipeline batches inherit),
// GlooOptions/NcclOptions::timeout (collectives), DdpOptions and
// SyncBatchNormOptions::timeout — so one setting changes them all; each
// call or option may still set its own.
#pragma once

#include "absl/time/time.h"

namespace tessera {

inline constexpr absl::Duration kBuiltinDefaultTimeout = absl::Seconds(60);

// How far past a call's own deadline a blocking wait on it goes: the call
// fails at its deadline, naming its cause; this only guards against a
// broken agent that never completes it.
inline constexpr absl::Duration kWaitBackstop = absl::Seconds(1);

// TESSERA_TIMEOUT_S (seconds, fractions allowed, > 0) when set and valid
// (an invalid value is logged and ignored), else 60 s.
absl::Duration DefaultTimeout();

}  // namespace tessera
