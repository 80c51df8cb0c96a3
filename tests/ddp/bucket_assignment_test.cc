#include "ddp/bucket_assignment.h"

#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

namespace tessera::ddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

at::Tensor Floats(int64_t n, at::ScalarType dtype = at::kFloat) {
  return at::empty({n}, at::TensorOptions().dtype(dtype));
}

std::vector<size_t> Reversed(size_t n) {
  std::vector<size_t> order;
  for (size_t k = n; k-- > 0;) order.push_back(k);
  return order;
}

constexpr size_t kMiB = 1 << 20;

// The benchmark's MLP: four 1024x1024 layers, registered weight, bias, ...
std::vector<at::Tensor> Mlp() {
  std::vector<at::Tensor> parameters;
  for (int layer = 0; layer < 4; ++layer) {
    parameters.push_back(Floats(1024 * 1024));  // 4 MiB
    parameters.push_back(Floats(1024));
  }
  return parameters;
}

TEST(BucketAssignmentTest, FirstBucketIsSmallThenBucketsFillToTheCap) {
  // Backward order: bias 3, weight 3 (the 1 MiB first limit is passed: the
  // first bucket closes), then the other 12 MiB under a 25 MiB cap.
  EXPECT_EQ(AssignBuckets(Mlp(), Reversed(8), {kMiB, 25 * kMiB}),
            (Buckets{{7, 6}, {5, 4, 3, 2, 1, 0}}));
  // A 5 MiB cap closes a bucket at the first parameter that reaches it.
  EXPECT_EQ(AssignBuckets(Mlp(), Reversed(8), {kMiB, 5 * kMiB}),
            (Buckets{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
}

TEST(BucketAssignmentTest, ALimitSmallerThanOneParameterGivesItsOwnBucket) {
  EXPECT_EQ(AssignBuckets(Mlp(), Reversed(8), {kMiB, kMiB}),
            (Buckets{{7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(AssignBuckets({Floats(100), Floats(100)}, {0, 1}, {1, 1}), (Buckets{{0}, {1}}));
}

TEST(BucketAssignmentTest, FirstLimitNeverExceedsTheCap) {
  // A 100-byte cap with the default 1 MiB first limit: the cap wins.
  EXPECT_EQ(AssignBuckets({Floats(25), Floats(25), Floats(25)}, {0, 1, 2}, {kMiB, 100}),
            (Buckets{{0}, {1}, {2}}));
}

TEST(BucketAssignmentTest, DtypesNeverShareABucket) {
  // A double layer between float ones: it gets its own bucket (with its own
  // small first limit), and the float buckets fill around it.
  const std::vector<at::Tensor> parameters = {Floats(10), Floats(10, at::kDouble), Floats(10),
                                              Floats(10, at::kDouble), Floats(10)};
  EXPECT_EQ(AssignBuckets(parameters, {0, 1, 2, 3, 4}, {kMiB, kMiB}),
            (Buckets{{0, 2, 4}, {1, 3}}));
  // Each kind's first bucket closes at the first limit on its own.
  EXPECT_EQ(AssignBuckets(parameters, {0, 1, 2, 3, 4}, {40, kMiB}),
            (Buckets{{0}, {1}, {2, 4}, {3}}));
}

TEST(BucketAssignmentTest, NoParametersNoBuckets) {
  EXPECT_TRUE(AssignBuckets({}, {}, {}).empty());
}

}  // namespace
}  // namespace tessera::ddp
