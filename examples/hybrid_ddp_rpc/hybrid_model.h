// The hybrid DDP + RPC model: a large embedding table on the parameter
// server (an EmbeddingBag-style sum over patch ids, served through an RRef)
// and a dense classifier replicated on the trainers with DDP.
//
// Fashion-MNIST images become bags of 49 "patch words": each 4x4 patch at
// each of the 7x7 positions is summarised by its four 2x2 quadrant means,
// each quantised to 4 levels, so a patch id is position x 256 + pattern
// (12,544 table rows). The table row of each word is learnt.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/mutex.h"
#include "rpc/call_context.h"
#include "rref/class_registry.h"
#include "rref/rref.h"

namespace tessera::examples {

inline constexpr int64_t kPatchWords = 49;            // per image
inline constexpr int64_t kVocabulary = 49 * 256;      // table rows
inline constexpr int64_t kEmbeddingDim = 64;

// Patch-word ids [N, 49] (int64) for images [N, 1, 28, 28] in [0, 1].
at::Tensor PatchWords(const at::Tensor& images);

// The table, owned by the parameter server: Lookup sums the rows of each
// image's words. Trainers step it concurrently, so it is read under the
// ParameterGuard their optimizers take; its backward needs only the ids
// (index_select + index_add), never the table's values, so a step between a
// trainer's forward and backward cannot invalidate that trainer's graph.
class EmbeddingTable {
 public:
  EmbeddingTable(int64_t rows, int64_t dim, int64_t seed);
  // [N, dim]: for each row of `words` [N, W], the sum of its W rows.
  at::Tensor Lookup(at::Tensor words);
  std::vector<rref::RRef<at::Tensor>> ParameterRRefs(rpc::CallContext& ctx);
  // The gradient the table received in a distributed autograd context
  // (zeros if none), and a copy of its values.
  at::Tensor Gradient(rpc::CallContext& ctx, int64_t context_id);
  at::Tensor Values();

 private:
  at::Tensor weight_;
};

// Registers EmbeddingTable as "EmbeddingTable" (rows, dim, seed).
void RegisterHybridClasses(rref::ClassRegistry& classes);

}  // namespace tessera::examples
