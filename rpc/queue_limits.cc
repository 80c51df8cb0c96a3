#include "rpc/queue_limits.h"

#include "absl/strings/str_cat.h"

namespace tessera::rpc {

bool RequestAdmission::TryAdmit() {
  int held = held_.load(std::memory_order_relaxed);
  do {
    if (held >= limit_) return false;
  } while (!held_.compare_exchange_weak(held, held + 1, std::memory_order_relaxed));
  return true;
}

absl::Status RequestAdmission::Refusal(const std::string& self_name) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "worker '", self_name, "' already holds ", limit_,
      " calls, queued or running (RpcOptions::queues.max_requests_in_service); this call was "
      "not run: wait for answers before sending more (see Note [Bounded queues])"));
}

absl::Status UnsentBytesExhausted(uint64_t waiting, uint64_t bytes, uint64_t limit,
                                  const std::string& self_name) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "'", self_name, "' has ", waiting, " bytes of calls to this peer not yet sent; this call's ",
      bytes, " more would pass ", limit,
      " (RpcOptions::queues.max_unsent_bytes_per_peer): the peer or the link is slower than the "
      "calls (see Note [Bounded queues])"));
}

}  // namespace tessera::rpc
