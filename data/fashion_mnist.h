// Fashion-MNIST from Debian's dataset-fashion-mnist (gzipped IDX files in
// /usr/share/datasets/fashion-mnist/), as float images in [0, 1] shaped
// [N, 1, 28, 28] and int64 labels [N].
//
// A missing file is a NotFound error that says which package to install;
// files whose headers do not match the IDX format or each other are
// DataLoss errors. Nothing is allocated before the header is checked.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "absl/status/statusor.h"

namespace tessera::data {

inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

struct Examples {
  at::Tensor images;  // float32 [N, 1, 28, 28], values in [0, 1]
  at::Tensor labels;  // int64 [N], classes 0..9
};

enum class Split { kTrain, kTest };

// Throws StatusError: NotFound (naming the Debian package) when the files
// are missing, DataLoss when they are malformed.
Examples LoadFashionMnist(Split split, const std::string& directory = kFashionMnistDir);

// Reads one gzipped IDX file (exposed for tests): magic 0x0000080<dims>,
// big-endian sizes, then unsigned bytes.
absl::StatusOr<at::Tensor> ReadIdx(const std::string& path);

}  // namespace tessera::data
