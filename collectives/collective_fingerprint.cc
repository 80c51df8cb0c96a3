#include "collectives/collective_fingerprint.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/process_group.h"

namespace tessera::collectives {
namespace {

// Layout: kind, param, then two tensors of kTensorWords each:
// dtype (-1 when undefined), device type, device index, contiguous, ndim,
// then kShownDims sizes (a tensor of more dimensions has the product of the
// rest in the last one).
constexpr int kShownDims = 7;
constexpr int kTensorWords = 5 + kShownDims;
static_assert(2 + 2 * kTensorWords == kFingerprintWords);

void WriteTensor(const at::Tensor& tensor, int64_t* words) {
  std::fill(words, words + kTensorWords, 0);
  if (!tensor.defined()) {
    words[0] = -1;
    return;
  }
  words[0] = static_cast<int64_t>(tensor.scalar_type());
  words[1] = static_cast<int64_t>(tensor.device().type());
  words[2] = tensor.device().index();
  words[3] = tensor.is_contiguous() ? 1 : 0;
  words[4] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    const int slot = 5 + std::min<int>(d, kShownDims - 1);
    words[slot] = d < kShownDims ? tensor.size(d) : words[slot] * tensor.size(d);
  }
}

std::string DescribeTensor(const int64_t* words) {
  if (words[0] < 0) return "an undefined tensor";
  std::vector<int64_t> sizes(words + 5, words + 5 + std::min<int64_t>(words[4], kShownDims));
  std::string text = absl::StrCat(c10::toString(static_cast<c10::ScalarType>(words[0])), "[",
                                  absl::StrJoin(sizes, ", "), words[4] > kShownDims ? "...]" : "]");
  const c10::Device device(static_cast<c10::DeviceType>(words[1]),
                           static_cast<c10::DeviceIndex>(words[2]));
  if (!device.is_cpu()) absl::StrAppend(&text, " on ", device.str());
  if (words[3] == 0) absl::StrAppend(&text, " (non-contiguous)");
  return text;
}

const char* ReduceOpName(int64_t op) {
  switch (static_cast<ReduceOp>(op)) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

}  // namespace

at::Tensor Fingerprint(CollectiveKind kind, int64_t param, const at::Tensor& first,
                       const at::Tensor& second) {
  at::Tensor words = at::empty({kFingerprintWords}, at::kLong);
  int64_t* data = words.data_ptr<int64_t>();
  data[0] = static_cast<int64_t>(kind);
  data[1] = param;
  WriteTensor(first, data + 2);
  WriteTensor(second, data + 2 + kTensorWords);
  return words;
}

std::string DescribeFingerprint(const int64_t* words) {
  const std::string first = DescribeTensor(words + 2);
  const std::string second = DescribeTensor(words + 2 + kTensorWords);
  switch (static_cast<CollectiveKind>(words[0])) {
    case CollectiveKind::kAllreduce:
      return absl::StrCat("allreduce(", ReduceOpName(words[1]), ") of ", first);
    case CollectiveKind::kBroadcast:
      return absl::StrCat("broadcast from rank ", words[1], " of ", first);
    case CollectiveKind::kAllgather:
      return absl::StrCat("allgather of ", first, " into ", second);
    case CollectiveKind::kReduceScatter:
      return absl::StrCat("reduce_scatter(", ReduceOpName(words[1]), ") of ", first, " into ",
                          second);
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return absl::StrCat("an unknown collective (", words[0], ")");
}

absl::Status CompareFingerprints(const at::Tensor& gathered, uint64_t call) {
  const int64_t* data = gathered.data_ptr<int64_t>();
  const int64_t ranks = gathered.numel() / kFingerprintWords;
  // Distinct calls in order of their lowest rank, with the ranks issuing each.
  std::map<std::vector<int64_t>, std::vector<int64_t>> ranks_by_call;
  std::vector<std::vector<int64_t>> calls;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    std::vector<int64_t> words(data + rank * kFingerprintWords,
                               data + (rank + 1) * kFingerprintWords);
    auto [it, inserted] = ranks_by_call.try_emplace(words);
    if (inserted) calls.push_back(words);
    it->second.push_back(rank);
  }
  if (calls.size() == 1) return absl::OkStatus();
  std::vector<std::string> parts;
  for (const auto& words : calls) {
    const auto& issuers = ranks_by_call[words];
    parts.push_back(absl::StrCat(issuers.size() == 1 ? "rank " : "ranks ",
                                 absl::StrJoin(issuers, ", "), " issued ",
                                 DescribeFingerprint(words.data())));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "collective #", call, " differs across ranks (not run): ", absl::StrJoin(parts, "; ")));
}

}  // namespace tessera::collectives
