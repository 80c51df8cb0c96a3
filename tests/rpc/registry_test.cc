#include "rpc/registry.h"

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>

namespace tessera::rpc {
namespace {

absl::StatusOr<c10::IValue> Call(const Registry& registry, const std::string& name,
                                 std::vector<c10::IValue> args) {
  CallContext context;
  return registry.Invoke(name, context, std::move(args)).Wait(absl::Seconds(5));
}

TEST(RegistryTest, SignaturesDescribeTheCppTypes) {
  Registry registry;
  registry.Register("f",
                    [](at::Tensor, int64_t, double, std::vector<std::string>,
                       std::map<std::string, at::Tensor>, std::optional<bool>) { return 1.0; });
  registry.Register("g", [](CallContext&) {});
  EXPECT_EQ(registry.Find("f")->signature,
            "(Tensor, int, float, List[str], Dict[str, Tensor], Optional[bool]) -> float");
  EXPECT_EQ(registry.Find("g")->signature, "() -> None");
  EXPECT_EQ(registry.Find("h"), nullptr);
}

TEST(RegistryTest, DuplicateNamesAreRejected) {
  Registry registry;
  registry.Register("f", [] { return 1; });
  EXPECT_EQ(StatusOf([&] { registry.Register("f", [] { return 2; }); }).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(RegistryTest, ArgumentsAreCheckedBeforeTheFunctionRuns) {
  Registry registry;
  int runs = 0;
  registry.Register("scale", [&runs](at::Tensor t, int64_t k) {
    ++runs;
    return t * k;
  });
  auto wrong = Call(registry, "scale", {c10::IValue(at::ones({2})), c10::IValue(1.5)});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(),
            "function 'scale' expects (Tensor, int) -> Tensor but got (Tensor, float)");
  auto arity = Call(registry, "scale", {c10::IValue(at::ones({2}))});
  EXPECT_EQ(arity.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runs, 0);
  auto ok = Call(registry, "scale", {c10::IValue(at::ones({2})), c10::IValue(int64_t{3})});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->toTensor().sum().item<float>(), 6.0f);
  EXPECT_EQ(runs, 1);
}

TEST(RegistryTest, IntsAreAcceptedWhereFloatsAreExpectedButNotTheReverse) {
  Registry registry;
  registry.Register("half", [](double x) { return x / 2; });
  registry.Register("id", [](int32_t x) { return x; });
  EXPECT_EQ(Call(registry, "half", {c10::IValue(int64_t{3})})->toDouble(), 1.5);
  EXPECT_FALSE(Call(registry, "id", {c10::IValue(2.0)}).ok());
  // Out of range for int32 is a type error, not a silent truncation.
  EXPECT_FALSE(Call(registry, "id", {c10::IValue(int64_t{1} << 40)}).ok());
}

TEST(RegistryTest, ExceptionsStatusesAndFuturesBecomeResults) {
  Registry registry;
  registry.Register("throws", []() -> int64_t { throw std::runtime_error("bad"); });
  registry.Register("status", []() -> absl::StatusOr<int64_t> {
    return absl::FailedPreconditionError("not ready");
  });
  Promise<std::string> later;
  registry.Register("later", [later]() { return later.GetFuture(); });
  auto thrown = Call(registry, "throws", {});
  EXPECT_EQ(thrown.status().code(), absl::StatusCode::kUnknown);
  EXPECT_NE(thrown.status().message().find("bad"), std::string::npos);
  EXPECT_EQ(Call(registry, "status", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  CallContext context;
  auto pending = registry.Invoke("later", context, {});
  EXPECT_FALSE(pending.IsReady());
  later.Set("now");
  EXPECT_EQ(pending.Wait(absl::Seconds(1))->toStringRef(), "now");
  EXPECT_EQ(Call(registry, "missing", {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::rpc
