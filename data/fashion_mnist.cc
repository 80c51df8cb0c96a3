#include "data/fashion_mnist.h"

#include <ATen/ops/empty.h>
#include <zlib.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

bool ReadExactly(gzFile file, void* out, size_t size) {
  char* cursor = static_cast<char*>(out);
  while (size > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 30));
    const int n = gzread(file, cursor, chunk);
    if (n <= 0) return false;
    cursor += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

uint32_t BigEndian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

absl::StatusOr<at::Tensor> ReadIdx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cannot open ", path, "; install the data with: apt-get install dataset-fashion-mnist"));
  }
  unsigned char magic[4];
  if (!ReadExactly(file.get(), magic, 4) || magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 ||
      magic[3] == 0 || magic[3] > 4) {
    return absl::DataLossError(path + ": not an IDX file of unsigned bytes");
  }
  std::vector<int64_t> sizes(magic[3]);
  int64_t total = 1;
  for (auto& size : sizes) {
    unsigned char b[4];
    if (!ReadExactly(file.get(), b, 4)) return absl::DataLossError(path + ": truncated header");
    size = BigEndian(b);
    total *= size;
    if (total > (int64_t{1} << 31)) return absl::DataLossError(path + ": implausible sizes");
  }
  at::Tensor data = at::empty(sizes, at::TensorOptions().dtype(at::kByte));
  if (!ReadExactly(file.get(), data.data_ptr(), static_cast<size_t>(total))) {
    return absl::DataLossError(absl::StrCat(path, ": truncated (expected ", total, " bytes)"));
  }
  return data;
}

Examples LoadFashionMnist(Split split, const std::string& directory) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  at::Tensor images =
      ValueOrThrow(ReadIdx(absl::StrCat(directory, "/", prefix, "-images-idx3-ubyte.gz")));
  at::Tensor labels =
      ValueOrThrow(ReadIdx(absl::StrCat(directory, "/", prefix, "-labels-idx1-ubyte.gz")));
  if (images.dim() != 3 || images.size(1) != 28 || images.size(2) != 28 || labels.dim() != 1 ||
      labels.size(0) != images.size(0)) {
    throw StatusError(absl::DataLossError(
        absl::StrCat("Fashion-MNIST ", prefix, " files do not match: images ",
                     images.sizes().vec().size(), "-d, labels ", labels.numel())));
  }
  Examples examples;
  examples.images = images.to(at::kFloat).div_(255.0).unsqueeze(1);
  examples.labels = labels.to(at::kLong);
  return examples;
}

}  // namespace tessera::data
