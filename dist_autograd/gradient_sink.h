// GradientSink: where leaf gradients live during a distributed backward.
//
// A plain backward() accumulates a leaf's gradient into .grad and then runs
// the post hooks of the leaf's gradient accumulator — DDP's Reducer hooks
// there. A distributed autograd pass accumulates into its context instead
// and never touches .grad; it then runs the same post hooks with the
// pass's GradientSink current on the thread, so a hook reads and replaces
// the gradient where it lives, and defers end-of-pass work with AtPassEnd
// (a plain backward's Engine::queue_callback). This small target is all
// that ddp/ needs to work inside distributed autograd; it does not pull in
// RPC.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace tessera::dist_autograd {

class GradientSink {
 public:
  virtual ~GradientSink() = default;

  // The gradient `variable` has accumulated so far (undefined if none).
  virtual at::Tensor Get(const at::Tensor& variable) = 0;
  // Replaces the gradient accumulated for `variable`.
  virtual void Set(const at::Tensor& variable, const at::Tensor& grad) = 0;
  // Runs `fn` on this thread once the pass has delivered all its leaf
  // gradients and run their hooks; an exception from `fn` fails the pass.
  virtual void AtPassEnd(std::function<void()> fn) = 0;

  // The sink of the pass running hooks on this thread, or null.
  static GradientSink* Current();
};

// Makes `sink` current on this thread for the guard's lifetime.
class GradientSinkScope {
 public:
  explicit GradientSinkScope(GradientSink* sink);
  ~GradientSinkScope();
  GradientSinkScope(const GradientSinkScope&) = delete;
  GradientSinkScope& operator=(const GradientSinkScope&) = delete;

 private:
  GradientSink* const previous_;
};

}  // namespace tessera::dist_autograd
