#include "examples/pipeline_transformer/vit.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::examples {
namespace {

constexpr int64_t kPatch = 7;
constexpr int64_t kTokens = (28 / kPatch) * (28 / kPatch);
constexpr int64_t kClasses = 10;
constexpr size_t kEmbedParams = 3;   // patch weight, bias; positions
constexpr size_t kBlockParams = 12;  // 2 norms, qkv, projection, 2 MLP layers
constexpr size_t kHeadParams = 4;    // norm; linear

at::Tensor Uniform(at::IntArrayRef shape, int64_t fan_in, at::Generator& generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return at::empty(shape).uniform_(-bound, bound, generator).set_requires_grad(true);
}

// Weight [out, in] and bias [out], as torch.nn.Linear draws them.
void AddLinear(int64_t in, int64_t out, at::Generator& generator, std::vector<at::Tensor>* p) {
  p->push_back(Uniform({out, in}, in, generator));
  p->push_back(Uniform({out}, in, generator));
}

void AddNorm(int64_t dim, std::vector<at::Tensor>* p) {
  p->push_back(at::ones({dim}).set_requires_grad(true));
  p->push_back(at::zeros({dim}).set_requires_grad(true));
}

// The blocks of part `chunk`: [first, last).
std::pair<int64_t, int64_t> BlocksOf(const VitConfig& config, int chunk, int chunks) {
  if (chunks < 1 || chunks > config.blocks || chunk < 0 || chunk >= chunks) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("a ViT of ", config.blocks, " blocks has no part ", chunk, " of ", chunks)));
  }
  return {config.blocks * chunk / chunks, config.blocks * (chunk + 1) / chunks};
}

at::Tensor Norm(const at::Tensor& x, const at::Tensor* p) {
  return at::layer_norm(x, {x.size(-1)}, p[0], p[1]);
}

at::Tensor Attention(const VitConfig& config, const at::Tensor& x, const at::Tensor* p) {
  const int64_t n = x.size(0), t = x.size(1), head_dim = config.dim / config.heads;
  // [N, T, 3, H, d] -> [3, N, H, T, d]
  at::Tensor qkv =
      at::linear(x, p[0], p[1]).reshape({n, t, 3, config.heads, head_dim}).permute({2, 0, 3, 1, 4});
  at::Tensor scores = at::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(head_dim);
  at::Tensor mixed = at::matmul(at::softmax(scores, -1), qkv[2]);
  return at::linear(mixed.permute({0, 2, 1, 3}).reshape({n, t, config.dim}), p[2], p[3]);
}

at::Tensor Block(const VitConfig& config, at::Tensor x, const at::Tensor* p) {
  x = x + Attention(config, Norm(x, p), p + 2);
  return x + at::linear(at::gelu(at::linear(Norm(x, p + 6), p[8], p[9])), p[10], p[11]);
}

at::Tensor Embed(const at::Tensor& images, const at::Tensor* p) {
  const int64_t n = images.size(0), side = 28 / kPatch;
  at::Tensor patches = images.reshape({n, side, kPatch, side, kPatch})
                           .permute({0, 1, 3, 2, 4})
                           .reshape({n, kTokens, kPatch * kPatch});
  return at::linear(patches, p[0], p[1]) + p[2];
}

at::Tensor Head(const at::Tensor& x, const at::Tensor* p) {
  return at::linear(Norm(x, p).mean(1), p[2], p[3]);
}

}  // namespace

std::vector<at::Tensor> InitVit(const VitConfig& config, uint64_t seed) {
  if (config.dim % config.heads != 0) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("ViT width ", config.dim, " is not divisible by ", config.heads, " heads")));
  }
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> p;
  AddLinear(kPatch * kPatch, config.dim, generator, &p);
  p.push_back(
      (at::empty({kTokens, config.dim}).normal_(0, 0.02, generator)).set_requires_grad(true));
  for (int64_t block = 0; block < config.blocks; ++block) {
    AddNorm(config.dim, &p);
    AddLinear(config.dim, 3 * config.dim, generator, &p);
    AddLinear(config.dim, config.dim, generator, &p);
    AddNorm(config.dim, &p);
    AddLinear(config.dim, config.mlp, generator, &p);
    AddLinear(config.mlp, config.dim, generator, &p);
  }
  AddNorm(config.dim, &p);
  AddLinear(config.dim, kClasses, generator, &p);
  return p;
}

namespace {

// Where part `chunk`'s parameters lie in InitVit's list: [begin, end).
std::pair<size_t, size_t> ChunkRange(const VitConfig& config, int chunk, int chunks) {
  const auto [first, last] = BlocksOf(config, chunk, chunks);
  const size_t begin = chunk == 0 ? 0 : kEmbedParams + first * kBlockParams;
  const size_t end = kEmbedParams + last * kBlockParams + (chunk == chunks - 1 ? kHeadParams : 0);
  return {begin, end};
}

}  // namespace

std::vector<at::Tensor> ChunkParameters(const VitConfig& config, const std::vector<at::Tensor>& all,
                                        int chunk, int chunks) {
  const auto [begin, end] = ChunkRange(config, chunk, chunks);
  return std::vector<at::Tensor>(all.begin() + begin, all.begin() + end);
}

size_t ChunkParameterCount(const VitConfig& config, int chunk, int chunks) {
  const auto [begin, end] = ChunkRange(config, chunk, chunks);
  return end - begin;
}

at::Tensor VitChunk(const VitConfig& config, const std::vector<at::Tensor>& params, int chunk,
                    int chunks, const at::Tensor& input) {
  const auto [first, last] = BlocksOf(config, chunk, chunks);
  const at::Tensor* p = params.data();
  at::Tensor x = input;
  if (chunk == 0) {
    x = Embed(x, p);
    p += kEmbedParams;
  }
  for (int64_t block = first; block < last; ++block, p += kBlockParams) x = Block(config, x, p);
  return chunk == chunks - 1 ? Head(x, p) : x;
}

at::Tensor VitForward(const VitConfig& config, const std::vector<at::Tensor>& params,
                      const at::Tensor& images) {
  return VitChunk(config, params, 0, 1, images);
}

}  // namespace tessera::examples
