// Distributed autograd — the C++ counterpart of torch.distributed.autograd.
//
//   auto worker = tessera::Worker::Start(options);   // attaches a DistAutograd
//   auto& autograd = worker->autograd();
//   {
//     dist_autograd::ContextGuard context(autograd);     // id unique in the job
//     at::Tensor y = worker->RpcSync<at::Tensor>("ps", "forward", x);
//     at::Tensor loss = (y - target).pow(2).sum();
//     autograd.Backward(context.id(), {loss});           // throws StatusError
//     auto grads = autograd.GetGradients(context.id());  // leaf -> gradient
//     optimizer.Step(context.id());
//   }  // released here and on every worker that took part
//
// Note [Distributed autograd] (after PyTorch's design, FAST mode):
// - A context has an id unique across workers (the creating rank in the
//   high bits). It is current on the thread of its ContextGuard, and on the
//   serving thread of every call made inside it, so nested calls carry it.
// - Recording: every call made inside a context carries its id. When the
//   message — request or response, of rpc_sync/rpc_async, remote(), RRef
//   method calls and to_here() — holds tensors that require grad, the
//   sender records a SendRpcBackward over them under a fresh send id, and
//   the receiver makes the received tensors outputs of a RecvRpcBackward
//   that remembers (sender, send id). See rpc_functions.h.
// - Backward(context, roots): LibTorch's engine runs the local graph; leaf
//   gradients go into the context; gradients that reach recv functions go to
//   their senders ("dist_autograd.backward"), which run their local graph
//   from the send function the same way, recursively and concurrently. A
//   call returns when its local pass and all the remote passes it started
//   are done, so Backward returns when the whole pass is. Errors travel back
//   the same way, naming the worker; every wait has a deadline.
// - FAST mode: each send function runs its own local pass when its
//   gradients arrive. Where several passes share a subgraph, it is computed
//   more than once (gradients add up, by linearity); so passes started by
//   gradients from peers keep their graph until the context is released.
//   Remote passes start when the local pass that feeds them has finished.
// - Release: a worker releases its context and tells every worker it sent
//   messages to in it, which do the same. Late messages of a released
//   context are served without recording (a bounded memory of released ids).
//   When a worker dies, the contexts it created are released everywhere
//   else.
//
// Thread-safety: thread-safe. Several contexts may run backward at once on
// one worker, and several passes of one context.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/future.h"
#include "dist_autograd/call_recorder.h"
#include "dist_autograd/context.h"
#include "dist_autograd/context_table.h"
#include "dist_autograd/local_pass.h"
#include "rpc/call_options.h"
#include "rpc/runtime.h"
#include "rpc/runtime_extension.h"

namespace tessera::dist_autograd {

class DistAutograd final : public rpc::RuntimeExtension,
                           public std::enable_shared_from_this<DistAutograd> {
 public:
  static std::shared_ptr<DistAutograd> Create();

  // A new context (not current anywhere; see ContextGuard and ContextScope).
  int64_t NewContext();
  // Releases the context here and, asynchronously, on every worker this one
  // sent messages to in it (which do the same). Unknown ids are ignored.
  void Release(int64_t context_id);

  // Runs the backward pass from `roots` (tensors that require grad; each is
  // seeded with a gradient of ones) across every worker involved, and
  // returns when it is complete; throws StatusError naming the worker where
  // it failed. `options.timeout` bounds the whole pass (zero: the runtime's
  // default call timeout).
  void Backward(int64_t context_id, const std::vector<at::Tensor>& roots, bool retain_graph = false,
                const rpc::CallOptions& options = {});
  // The same, returning the failure.
  absl::Status TryBackward(int64_t context_id, const std::vector<at::Tensor>& roots,
                           bool retain_graph = false, const rpc::CallOptions& options = {});

  // The gradients that backward passes of the context accumulated for this
  // worker's leaves: leaf tensor -> gradient. StatusError (NotFound) for an
  // unknown context.
  c10::Dict<at::Tensor, at::Tensor> GetGradients(int64_t context_id) const;
  // The gradients of `leaves` in order, zeros for a leaf that got none.
  std::vector<at::Tensor> GetGradients(int64_t context_id,
                                       const std::vector<at::Tensor>& leaves) const;
  // Adds gradients computed outside the engine's passes (a pipeline stage's
  // own backward, pipeline/stage.h) to what the context holds for `leaves`;
  // undefined gradients are skipped. Status NotFound for an unknown context.
  absl::Status AccumulateGradients(int64_t context_id, const std::vector<at::Tensor>& leaves,
                                   const std::vector<at::Tensor>& grads);
  // Whether this worker holds the context (not yet released here).
  bool HasContext(int64_t context_id) const;

  // The DistAutograd attached to `runtime` (from a registered function:
  // CallContext::runtime); StatusError (FailedPrecondition) naming the
  // worker if none.
  static DistAutograd& Of(const rpc::Runtime& runtime);

  // The context current on this thread, if any.
  std::optional<int64_t> current_context() const;

  // Contexts this worker holds now; and a bounded wait for a count (releases
  // arrive asynchronously), false on timeout.
  size_t num_contexts() const;
  bool WaitForContexts(size_t count, absl::Duration timeout) const;

  // --- rpc::RuntimeExtension ---
  void Attach(rpc::Runtime* runtime, rpc::Registry* internal) override;
  // Records the calls made in contexts (call_recorder.h).
  rpc::CallObserver* call_observer() override { return &recorder_; }
  // Contexts that a dead worker created are released here: nobody is left
  // to release them.
  void OnPeerUnavailable(int rank) override;
  void OnClosed() override;

 private:
  friend class ContextScope;

  DistAutograd() = default;
  std::string self_name() const;

  // Ships gradients to the senders of the recv functions they reached;
  // completes when those senders' passes (and theirs, ...) are done.
  Future<bool> Propagate(int64_t context_id, std::vector<RecvGradients> to_send,
                         absl::Time deadline);
  // Serves "dist_autograd.backward": a pass from one of our send functions.
  Future<bool> RunFromSend(int64_t context_id, int64_t send_id, std::vector<at::Tensor> grads,
                           absl::Time deadline);

  std::atomic<rpc::Runtime*> runtime_{nullptr};
  int self_rank_ = -1;
  std::atomic<int64_t> next_context_{1};
  ContextTable contexts_;
  CallRecorder recorder_{this, &contexts_};
};

// Makes a context current on this thread for its lifetime (the previous one
// is restored after). For continuations that run on other threads.
class ContextScope {
 public:
  ContextScope(const DistAutograd& autograd, int64_t context_id);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const DistAutograd* previous_owner_;
  int64_t previous_id_;
};

// A new context, current on this thread while the guard lives, released
// everywhere when it dies — `with dist_autograd.context() as context_id:`.
// Throws StatusError if a context of `autograd` is already current here.
class ContextGuard {
 public:
  explicit ContextGuard(DistAutograd& autograd);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

  int64_t id() const { return id_; }

 private:
  DistAutograd& autograd_;
  int64_t id_;
  std::optional<ContextScope> scope_;
};

}  // namespace tessera::dist_autograd
