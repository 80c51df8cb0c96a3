#include "ddp/comm_hook.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "ddp/powersgd_hook.h"

namespace tessera::ddp {
namespace {

class AllreduceCommHook final : public CommHook {
 public:
  collectives::Work Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) override {
    return group.Allreduce(bucket.flat, collectives::ReduceOp::kAverage);
  }
  std::string name() const override { return "allreduce"; }
};

class CompressCommHook final : public CommHook {
 public:
  explicit CompressCommHook(at::ScalarType wire) : wire_(wire) {}

  collectives::Work Reduce(const GradBucket& bucket, collectives::ProcessGroup& group) override {
    if (bucket.flat.scalar_type() == wire_)
      return group.Allreduce(bucket.flat, collectives::ReduceOp::kAverage);
    at::Tensor wire = bucket.flat.to(wire_);
    return group.Allreduce(wire, collectives::ReduceOp::kAverage)
        .Then([flat = bucket.flat,
               wire](const absl::StatusOr<std::monostate>& done) -> absl::StatusOr<std::monostate> {
          if (done.ok()) flat.copy_(wire);
          return done;
        });
  }
  std::string name() const override { return wire_ == at::kHalf ? "fp16" : "bf16"; }

 private:
  const at::ScalarType wire_;
};

}  // namespace

std::shared_ptr<CommHook> AllreduceHook() { return std::make_shared<AllreduceCommHook>(); }
std::shared_ptr<CommHook> Fp16CompressHook() {
  return std::make_shared<CompressCommHook>(at::kHalf);
}
std::shared_ptr<CommHook> Bf16CompressHook() {
  return std::make_shared<CompressCommHook>(at::kBFloat16);
}

std::shared_ptr<CommHook> CommHookNamed(const std::string& name) {
  if (name == "allreduce") return AllreduceHook();
  if (name == "fp16") return Fp16CompressHook();
  if (name == "bf16") return Bf16CompressHook();
  if (name == "powersgd") return std::make_shared<PowerSgdHook>(PowerSgdOptions{});
  PowerSgdOptions options;
  if (absl::StartsWith(name, "powersgd:") &&
      absl::SimpleAtoi(name.substr(9), &options.matrix_rank) && options.matrix_rank > 0) {
    return std::make_shared<PowerSgdHook>(options);
  }
  return nullptr;
}

}  // namespace tessera::ddp
