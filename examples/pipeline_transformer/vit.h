// A small Vision Transformer for Fashion-MNIST, written with ATen ops over
// an explicit list of parameters (as examples/common/cnn.h) so that it can
// be cut into pipeline stages anywhere between its blocks. An image's 16
// patches of 7x7 pixels are its tokens: a linear patch embedding plus a
// learned position embedding, `blocks` pre-norm transformer blocks
// (multi-head self-attention, then a GELU MLP, each with a residual), and a
// head: layer norm, the mean over tokens, a linear layer to 10 logits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tessera::examples {

struct VitConfig {
  int64_t dim = 32;    // token width
  int64_t heads = 2;   // attention heads (dim divisible by heads)
  int64_t mlp = 64;    // the MLP's hidden width
  int64_t blocks = 8;  // transformer blocks
};

// Every parameter, leaves that require grad, in a fixed order: the
// embedding's, each block's, the head's. Drawn from `seed`, so that every
// stage (each drawing the whole and keeping its part) starts as the whole.
std::vector<at::Tensor> InitVit(const VitConfig& config, uint64_t seed);

// The model cut into `chunks` consecutive parts of whole blocks (as evenly
// as they go; at most `blocks` parts): the first also embeds the patches,
// the last also holds the head. ChunkParameters picks part `chunk`'s
// parameters out of InitVit's; VitChunk runs that part: images
// [N, 1, 28, 28] in for the first, tokens [N, 16, dim] between, logits
// [N, 10] out of the last.
std::vector<at::Tensor> ChunkParameters(const VitConfig& config, const std::vector<at::Tensor>& all,
                                        int chunk, int chunks);
// How many parameters part `chunk` holds (ChunkParameters' size).
size_t ChunkParameterCount(const VitConfig& config, int chunk, int chunks);
at::Tensor VitChunk(const VitConfig& config, const std::vector<at::Tensor>& params, int chunk,
                    int chunks, const at::Tensor& input);

// The whole model: VitChunk with one chunk.
at::Tensor VitForward(const VitConfig& config, const std::vector<at::Tensor>& params,
                      const at::Tensor& images);

}  // namespace tessera::examples
