#include "ddp/reducer.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/trace.h"
#include "ddp/bucket_assignment.h"
#include "dist_autograd/gradient_sink.h"

namespace tessera::ddp {

using dist_autograd::GradientSink;

struct Reducer::State {
  Mutex mu;
  Reducer* reducer ABSL_GUARDED_BY(mu) = nullptr;  // null once the Reducer is gone
  bool sync ABSL_GUARDED_BY(mu) = true;
  bool in_backward ABSL_GUARDED_BY(mu) = false;
  // The pass's distributed autograd context, or null for a plain backward.
  GradientSink* sink ABSL_GUARDED_BY(mu) = nullptr;
  size_t next_to_launch ABSL_GUARDED_BY(mu) = 0;
  std::vector<bool> ready ABSL_GUARDED_BY(mu);  // per parameter, this pass
  ReducerPassStats stats ABSL_GUARDED_BY(mu);
  ReducerPassStats last_stats ABSL_GUARDED_BY(mu);
  // While tracing: this pass's backward, from its first gradient to its end.
  trace::Span backward_span ABSL_GUARDED_BY(mu);
  std::vector<size_t> bucket_of ABSL_GUARDED_BY(mu);  // parameter -> bucket
  // See Note [Bucket rebuild]: until done, the order in which this pass's
  // gradients arrived.
  bool rebuilt ABSL_GUARDED_BY(mu) = false;
  std::vector<size_t> arrival_order ABSL_GUARDED_BY(mu);
  // Inside a Join: the tracker, and this pass's announcement until settled.
  std::shared_ptr<JoinTracker> join ABSL_GUARDED_BY(mu);
  std::optional<JoinAnnouncement> announcement ABSL_GUARDED_BY(mu);

  void OnGradReady(size_t parameter);
  void StartPass() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Announce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status SettleAnnouncement() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void MarkUnusedReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool MarkReady(size_t parameter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void LaunchReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Launch(Bucket& bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Finalize();
  void WriteBack(Bucket& bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status RebuildBuckets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Groups parameters into buckets, taking them in `order` (see Note [Bucket
  // rebuild]); gradients already in the old buckets are not carried over.
  void AssignBuckets(const std::vector<size_t>& order) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
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

// A tensor of `sizes` on `flat`'s storage from element `offset`. Not an
// autograd view of `flat` (as narrow().view() would be): LibTorch's C++
// Optimizer::zero_grad() detaches .grad in place, which views refuse.
at::Tensor AliasOf(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  at::Tensor alias = at::empty({0}, flat.options());
  alias.set_(flat.storage(), flat.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  return alias;
}

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> parameters, collectives::ProcessGroup* group,
                 ReducerOptions options)
    : parameters_(std::move(parameters)),
      state_(std::make_shared<State>()),
      group_(group),
      options_(options),
      hook_(options.comm_hook != nullptr ? options.comm_hook : AllreduceHook()) {
  // Reverse registration order: the last layers' gradients are ready first.
  std::vector<size_t> order(parameters_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;
  {
    MutexLock lock(&state_->mu);
    state_->reducer = this;
    state_->AssignBuckets(order);
    state_->ready.assign(parameters_.size(), false);
  }
  for (size_t k = 0; k < parameters_.size(); ++k) {
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameters_[k]));
    accumulators_.back()->add_post_hook(std::make_unique<GradReadyHook>(state_, k));
  }
}

GradBucket Reducer::HookView(size_t index, const at::Tensor& flat) const {
  const Bucket& bucket = buckets_[index];
  GradBucket view{index, flat, {}, {}};
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    const at::Tensor& p = parameters_[bucket.parameters[i]];
    view.gradients.push_back(flat.narrow(0, bucket.offsets[i], p.numel()).view(p.sizes()));
    view.parameters.push_back(p);
  }
  return view;
}

void Reducer::State::AssignBuckets(const std::vector<size_t>& order) {
  std::vector<Bucket>& buckets = reducer->buckets_;
  const std::vector<at::Tensor>& parameters = reducer->parameters_;
  buckets.clear();
  bucket_of.assign(parameters.size(), 0);
  for (auto& members : ddp::AssignBuckets(parameters, order, reducer->options_.limits)) {
    Bucket& bucket = buckets.emplace_back();
    int64_t numel = 0;
    for (size_t k : members) {
      bucket.offsets.push_back(numel);
      numel += parameters[k].numel();
      bucket_of[k] = buckets.size() - 1;
    }
    bucket.parameters = std::move(members);
    bucket.flat = at::zeros({numel}, parameters[bucket.parameters.front()].options());
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

ReducerPassStats Reducer::last_pass() const {
  MutexLock lock(&state_->mu);
  return state_->last_stats;
}

void Reducer::State::OnGradReady(size_t parameter) {
  MutexLock lock(&mu);
  if (reducer == nullptr || !sync) return;
  if (!in_backward) StartPass();
  if (MarkReady(parameter)) {
    // Buckets launch in index order, so next_to_launch counts those sent
    // before this gradient; the pass's last gradient leaves the final count.
    stats.launched_before_last_gradient = next_to_launch;
    if (!rebuilt) arrival_order.push_back(parameter);
  }
  LaunchReady();
}

void Reducer::set_join(std::shared_ptr<JoinTracker> join) {
  MutexLock lock(&state_->mu);
  state_->join = std::move(join);
  state_->announcement.reset();
}

absl::Status Reducer::ShadowPass() {
  MutexLock lock(&state_->mu);
  std::vector<collectives::Work> works;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    works.push_back(hook_->Reduce(HookView(b, at::zeros_like(buckets_[b].flat)), *group_));
  }
  for (size_t b = 0; b < works.size(); ++b) {
    auto done = works[b].Wait(options_.timeout);
    if (!done.ok()) {
      return Annotate(
          done.status(),
          absl::StrCat("DistributedDataParallel::Join: shadowing gradient bucket ", b, " failed"));
    }
  }
  if (state_->rebuilt) return absl::OkStatus();
  state_->arrival_order.clear();  // rank 0's order decides; this rank's, if it is rank 0
  return state_->RebuildBuckets();
}

void Reducer::State::StartPass() {
  if (join != nullptr) Announce();
  in_backward = true;
  backward_span = trace::Span::Begin(trace::Track::kDdp, "ddp", "backward");
  next_to_launch = 0;
  ready.assign(ready.size(), false);
  stats = ReducerPassStats{};
  stats.buckets = reducer->buckets_.size();
  arrival_order.clear();
  for (auto& bucket : reducer->buckets_) bucket.pending = bucket.parameters.size();
  sink = GradientSink::Current();
  if (sink != nullptr) {
    sink->AtPassEnd([this] { Finalize(); });
  } else {
    // Runs when this backward pass ends, on the engine's thread.
    torch::autograd::Engine::get_default_engine().queue_callback([this] { Finalize(); });
    if (reducer->options_.find_unused_parameters) MarkUnusedReady();
  }
}

// See Note [Joining with uneven inputs]. Under throw_on_early_termination the
// round is settled before any bucket is sent, so a failure leaves nothing in
// flight; otherwise the buckets queue behind it and Finalize settles it.
void Reducer::State::Announce() {
  absl::Status stopped = join->Stopped();
  if (stopped.ok()) {
    announcement.emplace(reducer->group_, JoinStep::kBackward);
    if (!join->options().throw_on_early_termination) return;
    stopped = SettleAnnouncement();
  }
  ThrowIfError(stopped);
}

absl::Status Reducer::State::SettleAnnouncement() {
  if (!announcement.has_value()) return absl::OkStatus();
  const absl::Status settled = join->Settle(*announcement, reducer->options_.timeout).status();
  announcement.reset();
  return settled;
}

// Accumulators outside the running graph task's graph will not fire.
void Reducer::State::MarkUnusedReady() {
  const auto* in_graph = torch::autograd::get_current_graph_task_nodes_in_graph();
  if (in_graph == nullptr) return;
  for (size_t k = 0; k < reducer->accumulators_.size(); ++k) {
    if (in_graph->count(reducer->accumulators_[k].get()) == 0) {
      ++stats.unused_parameters;
      MarkReady(k);
    }
  }
}

// False if it already was.
bool Reducer::State::MarkReady(size_t parameter) {
  if (ready[parameter]) return false;
  ready[parameter] = true;
  --reducer->buckets_[bucket_of[parameter]].pending;
  return true;
}

void Reducer::State::LaunchReady() {
  auto& buckets = reducer->buckets_;
  while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
    Launch(buckets[next_to_launch++]);
  }
}

void Reducer::State::Launch(Bucket& bucket) {
  const bool as_view = reducer->options_.gradient_as_bucket_view && sink == nullptr;
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    at::Tensor& p = reducer->parameters_[bucket.parameters[i]];
    at::Tensor slice = bucket.flat.narrow(0, bucket.offsets[i], p.numel());
    const at::Tensor grad = sink != nullptr ? sink->Get(p) : p.grad();
    if (as_view && grad.defined() && grad.data_ptr() == slice.data_ptr()) {
      continue;  // accumulated in place, already in the bucket
    }
    if (grad.defined()) {
      slice.copy_(grad.reshape({-1}));
    } else {
      slice.zero_();  // no gradient this pass: it contributes zero
    }
    if (as_view) p.mutable_grad() = AliasOf(bucket.flat, bucket.offsets[i], p.sizes());
  }
  if (in_backward) ++stats.launched_during_backward;
  const auto index = static_cast<size_t>(&bucket - reducer->buckets_.data());
  bucket.work = reducer->hook_->Reduce(reducer->HookView(index, bucket.flat), *reducer->group_);
  if (trace::Enabled()) {
    // See Note [Tracing]: the bucket's reduction, from launch to done.
    auto span = std::make_shared<trace::Span>(trace::Span::Begin(
        trace::Track::kDdp, "ddp", absl::StrCat("allreduce bucket ", index)));
    span->Arg("bytes", static_cast<int64_t>(bucket.flat.nbytes()));
    bucket.work->OnReady([span](const absl::StatusOr<std::monostate>&) { span->End(); });
  }
}

void Reducer::State::Finalize() {
  MutexLock lock(&mu);
  in_backward = false;
  backward_span.End();
  if (reducer == nullptr) return;
  for (auto& bucket : reducer->buckets_) bucket.pending = 0;
  LaunchReady();
  last_stats = stats;
  const absl::Status joined = SettleAnnouncement();
  ThrowIfError(joined);
  const double scale = join != nullptr ? join->GradientScale() : 1.0;
  for (size_t b = 0; b < reducer->buckets_.size(); ++b) {
    Bucket& bucket = reducer->buckets_[b];
    auto result = bucket.work->Wait(reducer->options_.timeout);
    if (!result.ok()) {
      throw StatusError(Annotate(
          result.status(),
          absl::StrCat("DistributedDataParallel: averaging gradient bucket ", b, " failed")));
    }
    if (scale != 1.0) bucket.flat.mul_(scale);
    WriteBack(bucket);
  }
  if (rebuilt) return;
  const absl::Status agreed = RebuildBuckets();
  ThrowIfError(agreed);
}

// See Note [Bucket rebuild]. Every rank gets here after the same pass (the first
// synchronised one), so the broadcast matches up.
absl::Status Reducer::State::RebuildBuckets() {
  rebuilt = true;
  const size_t n = reducer->parameters_.size();
  std::vector<bool> arrived_this_pass(n, false);
  std::vector<int64_t> order;
  for (size_t k : arrival_order) {
    arrived_this_pass[k] = true;
    order.push_back(static_cast<int64_t>(k));
  }
  // Never arrived (unused, or sent as zero): after the rest, as guessed.
  for (size_t k = n; k-- > 0;) {
    if (!arrived_this_pass[k]) order.push_back(static_cast<int64_t>(k));
  }
  at::Tensor agreed = at::tensor(order);
  auto result = reducer->group_->Broadcast(agreed, 0).Wait(reducer->options_.timeout);
  if (!result.ok()) {
    return Annotate(
        result.status(),
        "DistributedDataParallel: agreeing on the gradient order for the buckets failed");
  }
  const int64_t* rank0 = agreed.data_ptr<int64_t>();
  AssignBuckets(std::vector<size_t>(rank0, rank0 + n));
  return absl::OkStatus();
}

// The averages from `flat` to where the gradients live.
void Reducer::State::WriteBack(Bucket& bucket) {
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    at::Tensor& p = reducer->parameters_[bucket.parameters[i]];
    at::Tensor averaged = bucket.flat.narrow(0, bucket.offsets[i], p.numel()).view(p.sizes());
    if (sink != nullptr) {
      sink->Set(p, averaged.clone());  // the context outlives this bucket's next use
    } else if (p.grad().defined() && p.grad().data_ptr() == averaged.data_ptr()) {
      continue;  // a bucket view: already there
    } else if (p.grad().defined()) {
      p.mutable_grad().copy_(averaged);
    } else {
      p.mutable_grad() = averaged.clone();
    }
  }
}

}  // namespace tessera::ddp
