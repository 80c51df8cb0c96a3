// Communication hooks: how DDP's Reducer averages a bucket of gradients
// across ranks (PyTorch's DistributedDataParallel.register_comm_hook).
//
//   ddp::DdpOptions options;
//   options.comm_hook = ddp::Fp16CompressHook();           // or Bf16CompressHook(),
//   options.comm_hook = std::make_shared<ddp::PowerSgdHook>(ddp::PowerSgdOptions{});
//
// The Reducer calls Reduce once per bucket per synchronised backward pass,
// in bucket order, on every rank. A hook must issue the same collectives in
// the same order on every rank: hooks whose collectives depend on earlier
// results (PowerSGD) chain them so that a bucket's start after the previous
// bucket's are issued.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/process_group.h"

namespace tessera::ddp {

// A bucket of gradients as a hook sees it.
struct GradBucket {
  size_t index = 0;  // stable from the second pass on (see Note [Bucket rebuild])
  // This rank's gradients, concatenated. When the hook's Work completes it
  // holds the average over the ranks (or the hook's approximation of it).
  at::Tensor flat;
  // Views into `flat`, one per parameter of the bucket, in its shape.
  std::vector<at::Tensor> gradients;
  // The bucket's parameters, in the same order (for hooks that step them).
  std::vector<at::Tensor> parameters;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Starts averaging `bucket` across `group`; completes once bucket.flat
  // holds the result, or with the collective's error.
  virtual collectives::Work Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) = 0;
  virtual std::string name() const = 0;
};

// The bucket as is, averaged by one allreduce (the default).
std::shared_ptr<CommHook> AllreduceHook();
// Compressed to 16 bits for the wire (half the bytes of float; averaged in
// the 16-bit type, then written back): fp16 (11 significant bits, range to
// 65504; PyTorch's fp16_compress_hook) or bfloat16 (8 significant bits,
// float's range, so large gradients do not overflow; bf16_compress_hook).
std::shared_ptr<CommHook> Fp16CompressHook();
std::shared_ptr<CommHook> Bf16CompressHook();
// By name: "allreduce", "fp16", "bf16", "powersgd" (rank 1) or
// "powersgd:R"; null for an unknown name.
std::shared_ptr<CommHook> CommHookNamed(const std::string& name);

}  // namespace tessera::ddp
