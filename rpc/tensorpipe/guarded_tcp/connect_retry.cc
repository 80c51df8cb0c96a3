#include "rpc/tensorpipe/guarded_tcp/connect_retry.h"

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera::rpc::guarded_tcp {

bool IsBusyListener(int connect_errno) {
  return connect_errno == EAGAIN || connect_errno == EWOULDBLOCK;
}

ConnectRetry::ConnectRetry(absl::Duration budget, absl::Duration first_delay,
                           absl::Duration max_delay)
    : budget_(budget),
      max_delay_(max_delay),
      delay_(first_delay),
      jitter_(static_cast<unsigned>(absl::ToUnixNanos(absl::Now()))) {}

void ConnectRetry::Attempted(absl::Time now) {
  if (attempts_++ == 0) first_attempt_ = now;
}

std::optional<absl::Duration> ConnectRetry::NextDelay(absl::Time now) {
  // Between half and one and a half times the nominal delay: dialers that
  // failed together do not come back together.
  const double factor = 0.5 + std::uniform_real_distribution<double>(0.0, 1.0)(jitter_);
  const absl::Duration delay = delay_ * factor;
  if (now + delay - first_attempt_ > budget_) return std::nullopt;
  delay_ = std::min(delay_ * 2, max_delay_);
  return delay;
}

std::string ConnectRetry::Describe(absl::Time now) const {
  return absl::StrCat(attempts_, attempts_ == 1 ? " attempt" : " attempts", " over ",
                      absl::FormatDuration(absl::Trunc(now - first_attempt_, absl::Milliseconds(1))));
}

}  // namespace tessera::rpc::guarded_tcp
