#include "ddp/bucket_assignment.h"

#include <algorithm>
#include <optional>

namespace tessera::ddp {
namespace {

// The bucket of one (dtype, device) that is being filled.
struct Filling {
  at::ScalarType dtype;
  at::Device device;
  std::optional<size_t> index;  // into the result; none once closed
  size_t bytes = 0;
  bool first = true;  // the first bucket of its kind
};

}  // namespace

std::vector<std::vector<size_t>> AssignBuckets(const std::vector<at::Tensor>& parameters,
                                               const std::vector<size_t>& order,
                                               BucketLimits limits) {
  const size_t first_cap = std::min(limits.first_cap_bytes, limits.cap_bytes);
  std::vector<std::vector<size_t>> buckets;
  std::vector<Filling> filling;  // one per kind seen; models have one or two
  for (size_t k : order) {
    const at::Tensor& p = parameters[k];
    auto kind = std::find_if(filling.begin(), filling.end(), [&](const Filling& f) {
      return f.dtype == p.scalar_type() && f.device == p.device();
    });
    if (kind == filling.end()) {
      kind = filling.insert(filling.end(), Filling{p.scalar_type(), p.device()});
    }
    if (!kind->index) {
      kind->index = buckets.size();
      buckets.emplace_back();
    }
    buckets[*kind->index].push_back(k);
    kind->bytes += p.numel() * p.element_size();
    if (kind->bytes >= (kind->first ? first_cap : limits.cap_bytes)) {
      kind->index.reset();
      kind->bytes = 0;
      kind->first = false;
    }
  }
  return buckets;
}

}  // namespace tessera::ddp
