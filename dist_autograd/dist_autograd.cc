#include "dist_autograd/dist_autograd.h"

#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/variable.h>

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/trace.h"
#include "dist_autograd/autograd_messages.h"

namespace tessera::dist_autograd {
namespace {

// Context ids: the creating rank above kCounterBits; below, the creating
// process's incarnation (a rank restarted alone starts its counter again,
// and must not reuse its old incarnation's ids, which peers may remember as
// released: see Note [Elastic membership]) above kIncarnationShift, a counter.
constexpr int kCounterBits = 48;
constexpr int kIncarnationShift = 32;

struct CurrentContext {
  const DistAutograd* owner = nullptr;
  int64_t id = 0;
};
thread_local CurrentContext current;

}  // namespace

// ---------------------------------------------------------------- scopes

ContextScope::ContextScope(const DistAutograd& autograd, int64_t context_id)
    : previous_owner_(current.owner), previous_id_(current.id) {
  current = {&autograd, context_id};
}

ContextScope::~ContextScope() { current = {previous_owner_, previous_id_}; }

ContextGuard::ContextGuard(DistAutograd& autograd) : autograd_(autograd) {
  if (auto existing = autograd.current_context()) {
    throw StatusError(absl::FailedPreconditionError(absl::StrCat(
        "distributed autograd context ", *existing,
        " is already current on this thread; contexts do not nest")));
  }
  id_ = autograd.NewContext();
  scope_.emplace(autograd, id_);
}

ContextGuard::~ContextGuard() {
  scope_.reset();
  autograd_.Release(id_);
}

// ---------------------------------------------------------------- contexts

std::shared_ptr<DistAutograd> DistAutograd::Create() {
  return std::shared_ptr<DistAutograd>(new DistAutograd());
}

void DistAutograd::Attach(rpc::Runtime* runtime, rpc::Registry* internal) {
  runtime_.store(runtime);
  self_rank_ = runtime->options().rank;
  recorder_.Attach(self_rank_, runtime->options().name);
  rpc::Serve<BackwardRequest>(*internal, [this](rpc::CallContext& ctx, BackwardRequest m) {
    return RunFromSend(m.context_id, m.send_id, std::move(m.grads), ctx.deadline);
  });
  rpc::Serve<ReleaseRequest>(
      *internal, [this](rpc::CallContext&, ReleaseRequest m) { Release(m.context_id); });
}

void DistAutograd::OnPeerUnavailable(int rank) {
  for (int64_t id : contexts_.IdsOf(rank, kCounterBits)) Release(id);
}

void DistAutograd::OnClosed() {
  runtime_.store(nullptr);
  contexts_.Clear();
}

std::string DistAutograd::self_name() const {
  rpc::Runtime* runtime = runtime_.load();
  return runtime == nullptr ? absl::StrCat("rank ", self_rank_) : runtime->options().name;
}

int64_t DistAutograd::NewContext() {
  rpc::Runtime* runtime = runtime_.load();
  const int64_t incarnation = runtime == nullptr ? 0 : runtime->self().incarnation & 0xffff;
  const int64_t id = (static_cast<int64_t>(self_rank_) << kCounterBits) |
                     (incarnation << kIncarnationShift) | next_context_.fetch_add(1);
  contexts_.Add(id);
  return id;
}

void DistAutograd::Release(int64_t context_id) {
  std::shared_ptr<Context> context = contexts_.Take(context_id);
  if (context == nullptr) return;  // never here, or already released
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) return;
  for (int rank : context->known_workers()) {
    // Fire and forget: a worker that is gone has nothing left to release.
    runtime->CallService(rank, ReleaseRequest{context_id})
        .OnReady([context_id, rank](const absl::StatusOr<std::monostate>& result) {
          if (!result.ok()) {
            TESSERA_LOG(WARNING) << "releasing distributed autograd context " << context_id
                                 << " on rank " << rank << ": " << result.status();
          }
        });
  }
}

std::optional<int64_t> DistAutograd::current_context() const {
  if (current.owner != this || current.id == 0) return std::nullopt;
  return current.id;
}

size_t DistAutograd::num_contexts() const { return contexts_.size(); }

bool DistAutograd::WaitForContexts(size_t count, absl::Duration timeout) const {
  return contexts_.WaitForSize(count, timeout);
}

c10::Dict<at::Tensor, at::Tensor> DistAutograd::GetGradients(int64_t context_id) const {
  auto context = contexts_.Find(context_id);
  if (context == nullptr) {
    throw StatusError(absl::NotFoundError(absl::StrCat(
        "no distributed autograd context ", context_id, " on worker '", self_name(), "'")));
  }
  return context->gradients();
}

std::vector<at::Tensor> DistAutograd::GetGradients(int64_t context_id,
                                                   const std::vector<at::Tensor>& leaves) const {
  auto grads = GetGradients(context_id);
  std::vector<at::Tensor> result;
  for (const auto& leaf : leaves) {
    result.push_back(grads.contains(leaf) ? grads.at(leaf) : at::zeros_like(leaf));
  }
  return result;
}

absl::Status DistAutograd::AccumulateGradients(int64_t context_id,
                                               const std::vector<at::Tensor>& leaves,
                                               const std::vector<at::Tensor>& grads) {
  auto context = contexts_.Find(context_id);
  if (context == nullptr) {
    return absl::NotFoundError(absl::StrCat("no distributed autograd context ", context_id,
                                            " on worker '", self_name(), "'"));
  }
  for (size_t i = 0; i < leaves.size() && i < grads.size(); ++i) {
    if (grads[i].defined()) context->AccumulateGrad(leaves[i], grads[i]);
  }
  return absl::OkStatus();
}

bool DistAutograd::HasContext(int64_t context_id) const {
  return contexts_.Find(context_id) != nullptr;
}

DistAutograd& DistAutograd::Of(const rpc::Runtime& runtime) {
  auto* autograd = runtime.FindExtension<DistAutograd>();
  if (autograd == nullptr) {
    throw StatusError(absl::FailedPreconditionError("worker '" + runtime.self().name +
                                                    "' runs without distributed autograd"));
  }
  return *autograd;
}

// ---------------------------------------------------------------- backward

void DistAutograd::Backward(int64_t context_id, const std::vector<at::Tensor>& roots,
                            bool retain_graph, const rpc::CallOptions& options) {
  ThrowIfError(TryBackward(context_id, roots, retain_graph, options));
}

absl::Status DistAutograd::TryBackward(int64_t context_id, const std::vector<at::Tensor>& roots,
                                       bool retain_graph, const rpc::CallOptions& options) {
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) return absl::FailedPreconditionError("RPC runtime is closed");
  auto context = contexts_.Find(context_id);
  if (context == nullptr) {
    return absl::NotFoundError(absl::StrCat("backward: no distributed autograd context ",
                                            context_id, " on worker '", self_name(), "'"));
  }
  if (roots.empty()) return absl::InvalidArgumentError("backward: no roots given");
  trace::Span span =
      trace::Span::Begin(trace::Track::kAutograd, "autograd", "distributed backward");
  span.Arg("context", context_id);
  torch::autograd::edge_list edges;
  std::vector<at::Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].defined() || !roots[i].requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backward: root ", i, " does not require grad (it has no graph to run)"));
    }
    edges.push_back(torch::autograd::impl::gradient_edge(roots[i]));
    seeds.push_back(at::ones_like(roots[i], at::MemoryFormat::Preserve));
  }
  const absl::Time deadline = absl::Now() + runtime->EffectiveTimeout(options);
  // Send functions of this context may lead into the same graph later.
  const bool keep_graph = retain_graph || context->has_sends();
  auto to_send = RunLocalPass(*context, edges, seeds, keep_graph);
  if (!to_send.ok()) {
    return Annotate(to_send.status(), "backward on worker '" + self_name() + "'");
  }
  // The calls carry the deadline and fail at it naming their worker.
  auto done = AwaitCall(Propagate(context_id, *std::move(to_send), deadline), deadline);
  if (!done.ok()) {
    return Annotate(done.status(), absl::StrCat("distributed backward of context ",
                                                context_id, " from '", self_name(), "'"));
  }
  return absl::OkStatus();
}

Future<bool> DistAutograd::Propagate(int64_t context_id, std::vector<RecvGradients> to_send,
                                     absl::Time deadline) {
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) {
    return Future<bool>::Ready(absl::FailedPreconditionError("RPC runtime is closed"));
  }
  rpc::CallOptions options;
  options.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  std::vector<Future<bool>> calls;
  for (auto& entry : to_send) {
    calls.push_back(runtime->CallService(
        entry.recv->from_rank(),
        BackwardRequest{context_id, entry.recv->peer_send_id(), std::move(entry.grads)}, options));
  }
  return WhenAllOk(calls);
}

Future<bool> DistAutograd::RunFromSend(int64_t context_id, int64_t send_id,
                                       std::vector<at::Tensor> grads, absl::Time deadline) {
  auto context = contexts_.Find(context_id);
  if (context == nullptr) {
    return Future<bool>::Ready(absl::NotFoundError(absl::StrCat(
        "no distributed autograd context ", context_id, " on worker '", self_name(),
        "' (released before the backward pass reached it?)")));
  }
  auto send = context->FindSend(send_id);
  if (send == nullptr) {
    return Future<bool>::Ready(absl::NotFoundError(absl::StrCat(
        "no send function ", send_id, " in distributed autograd context ", context_id,
        " on worker '", self_name(), "'")));
  }
  if (grads.size() != send->num_inputs()) {
    return Future<bool>::Ready(absl::InvalidArgumentError(absl::StrCat(
        "send function ", send_id, " sent ", send->num_inputs(), " tensors but ",
        grads.size(), " gradients came back")));
  }
  torch::autograd::edge_list roots;
  for (uint32_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !send->input_metadata(i).is_same_shape(grads[i])) {
      return Future<bool>::Ready(absl::InvalidArgumentError(absl::StrCat(
          "gradient ", i, " for send function ", send_id, " has the wrong shape")));
    }
    roots.emplace_back(send, i);
  }
  trace::Span span = trace::Span::Begin(trace::Track::kAutograd, "autograd", "local backward");
  span.Arg("context", context_id);
  auto to_send = RunLocalPass(*context, roots, grads, /*keep_graph=*/true);
  span.End();
  if (!to_send.ok()) return Future<bool>::Ready(to_send.status());
  if (deadline == absl::InfiniteFuture()) {
    rpc::Runtime* runtime = runtime_.load();
    if (runtime != nullptr) deadline = absl::Now() + runtime->options().default_call_timeout;
  }
  return Propagate(context_id, *std::move(to_send), deadline);
}

}  // namespace tessera::dist_autograd
