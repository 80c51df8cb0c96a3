#include "ddp/reducer.h"

#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace tessera::ddp {

struct Reducer::State {
  Mutex mu;
  Reducer* reducer ABSL_GUARDED_BY(mu) = nullptr;  // null once the Reducer is gone
  bool sync ABSL_GUARDED_BY(mu) = true;
  bool in_backward ABSL_GUARDED_BY(mu) = false;
  size_t next_to_launch ABSL_GUARDED_BY(mu) = 0;
  std::vector<size_t> bucket_of;  // parameter -> bucket (immutable)

  void OnGradReady(size_t parameter);
  void LaunchReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Launch(Bucket& bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Finalize();
};

namespace {

class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::weak_ptr<Reducer::State> state, size_t parameter)
      : state_(std::move(state)), parameter_(parameter) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto state = state_.lock()) state->OnGradReady(parameter_);
    return outputs;
  }

 private:
  std::weak_ptr<Reducer::State> state_;
  const size_t parameter_;
};

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> parameters, ProcessGroup* group,
                 size_t bucket_cap_bytes, absl::Duration timeout, CommHook hook)
    : parameters_(std::move(parameters)),
      state_(std::make_shared<State>()),
      group_(group),
      timeout_(timeout),
      hook_(hook) {
  // Reverse registration order: the last layers' gradients are ready first.
  state_->bucket_of.assign(parameters_.size(), 0);
  size_t bucket_bytes = 0;
  for (size_t k = parameters_.size(); k-- > 0;) {
    const at::Tensor& p = parameters_[k];
    const size_t bytes = p.numel() * p.element_size();
    if (buckets_.empty() || (bucket_bytes > 0 && bucket_bytes + bytes > bucket_cap_bytes)) {
      buckets_.emplace_back();
      bucket_bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    bucket.offsets.push_back(bucket.parameters.empty()
                                 ? 0
                                 : bucket.offsets.back() + parameters_[bucket.parameters.back()].numel());
    bucket.parameters.push_back(k);
    bucket_bytes += bytes;
    state_->bucket_of[k] = buckets_.size() - 1;
  }
  for (auto& bucket : buckets_) {
    int64_t numel = 0;
    for (size_t k : bucket.parameters) numel += parameters_[k].numel();
    bucket.flat = at::zeros({numel}, parameters_[bucket.parameters.front()].options());
  }
  {
    MutexLock lock(&state_->mu);
    state_->reducer = this;
  }
  for (size_t k = 0; k < parameters_.size(); ++k) {
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameters_[k]));
    accumulators_.back()->add_post_hook(std::make_unique<GradReadyHook>(state_, k));
  }
}

Reducer::~Reducer() {
  MutexLock lock(&state_->mu);
  state_->reducer = nullptr;  // hooks that still fire do nothing
}

void Reducer::set_sync(bool sync) {
  MutexLock lock(&state_->mu);
  state_->sync = sync;
}

void Reducer::State::OnGradReady(size_t parameter) {
  MutexLock lock(&mu);
  if (reducer == nullptr || !sync) return;
  if (!in_backward) {
    in_backward = true;
    next_to_launch = 0;
    for (auto& bucket : reducer->buckets_) {
      bucket.pending = bucket.parameters.size();
      bucket.launched = false;
    }
    // Runs when this backward pass ends, on the engine's thread.
    torch::autograd::Engine::get_default_engine().queue_callback([this] { Finalize(); });
  }
  Bucket& bucket = reducer->buckets_[bucket_of[parameter]];
  if (bucket.pending > 0) --bucket.pending;
  LaunchReady();
}

void Reducer::State::LaunchReady() {
  auto& buckets = reducer->buckets_;
  while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
    Launch(buckets[next_to_launch++]);
  }
}

void Reducer::State::Launch(Bucket& bucket) {
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    const at::Tensor& p = reducer->parameters_[bucket.parameters[i]];
    at::Tensor slice = bucket.flat.narrow(0, bucket.offsets[i], p.numel());
    if (p.grad().defined()) {
      slice.copy_(p.grad().reshape({-1}));
    } else {
      slice.zero_();  // no gradient this pass: it contributes zero
    }
  }
  bucket.launched = true;
  bucket.wire = reducer->hook_ == CommHook::kFp16Compress ? bucket.flat.to(at::kHalf)
                                                           : bucket.flat;
  bucket.work = reducer->group_->Allreduce(bucket.wire, ReduceOp::kAverage);
}

void Reducer::State::Finalize() {
  MutexLock lock(&mu);
  in_backward = false;
  if (reducer == nullptr) return;
  for (auto& bucket : reducer->buckets_) bucket.pending = 0;
  LaunchReady();
  for (size_t b = 0; b < reducer->buckets_.size(); ++b) {
    Bucket& bucket = reducer->buckets_[b];
    auto result = bucket.work->Wait(reducer->timeout_);
    if (!result.ok()) {
      throw std::runtime_error(absl::StrCat("DistributedDataParallel: averaging gradient bucket ",
                                            b, " failed: ", result.status().ToString()));
    }
    if (bucket.wire.data_ptr() != bucket.flat.data_ptr()) bucket.flat.copy_(bucket.wire);
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      at::Tensor& p = reducer->parameters_[bucket.parameters[i]];
      at::Tensor averaged =
          bucket.flat.narrow(0, bucket.offsets[i], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(averaged);
      } else {
        p.mutable_grad() = averaged.clone();
      }
    }
  }
}

}  // namespace tessera::ddp
