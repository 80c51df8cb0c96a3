#include "data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <string>

#include "common/status.h"

namespace tessera::data {
namespace {

std::string WriteGz(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path;
}

// The real data from Debian's package (installed by scripts/install_deps.sh).
TEST(FashionMnistTest, LoadsTheDebianPackage) {
  Examples train = LoadFashionMnist(Split::kTrain);
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.labels.sizes(), (std::vector<int64_t>{60000}));
  EXPECT_GE(train.images.min().item<float>(), 0.0f);
  EXPECT_LE(train.images.max().item<float>(), 1.0f);
  EXPECT_EQ(train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(train.labels.max().item<int64_t>(), 9);
  EXPECT_EQ(LoadFashionMnist(Split::kTest).labels.size(0), 10000);
}

TEST(FashionMnistTest, MissingDataNamesThePackage) {
  const absl::Status missing = StatusOf([] { LoadFashionMnist(Split::kTrain, "/nonexistent"); });
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("apt-get install dataset-fashion-mnist"), std::string::npos);
}

TEST(FashionMnistTest, MalformedFilesAreDataLossNotCrashes) {
  EXPECT_EQ(ReadIdx(WriteGz("bad_magic.gz", "GIF89a")).status().code(),
            absl::StatusCode::kDataLoss);
  // Header claims 1000 bytes, body has 3.
  // ("\xe8" "abc": a hex escape would swallow the hex digits a, b, c.)
  EXPECT_EQ(ReadIdx(WriteGz("short.gz", std::string("\0\0\x08\x01\0\0\x03\xe8" "abc", 11)))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  auto ok = ReadIdx(WriteGz("ok.gz", std::string("\0\0\x08\x01\0\0\0\x03xyz", 11)));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->numel(), 3);
}

}  // namespace
}  // namespace tessera::data
