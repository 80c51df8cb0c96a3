// The fingerprint of a collective call that checked groups
// (collectives/collective_checks.h) exchange and compare across ranks: which
// collective, its reduce op or root, and for each tensor its dtype, device,
// contiguity and shape -- everything a backend's result depends on besides
// the values, so equal fingerprints mean every rank's call is the same.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tessera::collectives {

enum class CollectiveKind : int64_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
};

// Words per fingerprint (int64 each).
inline constexpr int64_t kFingerprintWords = 26;

// A CPU int64 tensor of kFingerprintWords. `param` is the ReduceOp (as int)
// of reductions, the root of a broadcast, otherwise 0; `first` and
// `second` are the call's tensors in argument order (undefined when absent).
at::Tensor Fingerprint(CollectiveKind kind, int64_t param, const at::Tensor& first = {},
                       const at::Tensor& second = {});

// "allreduce(sum) of Float[2, 3]", "broadcast from rank 1 of Long[4]", ...
std::string DescribeFingerprint(const int64_t* words);

// `gathered` holds every rank's fingerprint in rank order. OK when all are
// equal; otherwise INVALID_ARGUMENT naming collective number `call` and what
// each group of ranks issued.
absl::Status CompareFingerprints(const at::Tensor& gathered, uint64_t call);

}  // namespace tessera::collectives
