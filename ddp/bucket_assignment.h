// Which parameters share a gradient bucket, and in which order buckets are
// launched.
//
// Parameters are taken in the given order (DDP passes the reverse of
// registration order, roughly the order gradients become ready) and added to
// the open bucket of their dtype and device — a bucket is one flat tensor,
// so a double parameter never travels rounded to float because a float one
// came first. A bucket closes once it holds at least its limit: the first
// bucket of each kind `first_cap_bytes` (a small one, so the first
// allreduce starts early in backward instead of waiting for a full cap's
// worth), the rest `cap_bytes`. This is PyTorch DDP's rule (its
// `_DEFAULT_FIRST_BUCKET_BYTES` is 1 MiB): a parameter larger than the limit
// still shares the bucket it lands in, so buckets overshoot rather than
// splitting a layer's weight from its bias.
//
// Buckets are ordered by when they were opened; every rank computes the same
// assignment from the same parameter shapes, so all issue the same
// collectives in the same order.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace tessera::ddp {

struct BucketLimits {
  size_t first_cap_bytes = 1 << 20;
  size_t cap_bytes = 25 << 20;
};

// Indices into `parameters`, one list per bucket, in launch order. The
// first limit is never above the cap.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<at::Tensor>& parameters,
                                               const std::vector<size_t>& order,
                                               BucketLimits limits);

}  // namespace tessera::ddp
