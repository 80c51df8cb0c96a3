// The one synchronous wait on a call (README, "Timeouts").
//
// Note [Waiting on a call]: every call Tessera sends carries its own
// deadline and fails at it with DeadlineExceeded naming the peer and what
// it was doing — that is the error a caller should see. A blocking wait on
// the call's future therefore waits past that deadline by kWaitBackstop,
// which matters only if an agent never completes the call at all; then the
// wait itself fails with DeadlineExceeded.
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/future.h"

namespace tessera {

inline constexpr absl::Duration kWaitBackstop = absl::Seconds(1);

// When a wait on a call due at `call_deadline` gives up.
inline absl::Time WaitDeadline(absl::Time call_deadline) { return call_deadline + kWaitBackstop; }

// The call's result, waiting as the Note says (see Note [Waiting on a call]); `call_timeout`
// is the call's own, resolved timeout (never zero).
template <typename T>
absl::StatusOr<T> AwaitCall(const Future<T>& call, absl::Duration call_timeout) {
  return call.Wait(WaitDeadline(absl::Now() + call_timeout));
}
template <typename T>
absl::StatusOr<T> AwaitCall(const Future<T>& call, absl::Time call_deadline) {
  return call.Wait(WaitDeadline(call_deadline));
}

}  // namespace tessera
