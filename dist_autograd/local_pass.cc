#include "dist_autograd/local_pass.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <functional>
#include <unordered_set>

#include "dist_autograd/gradient_sink.h"

namespace tessera::dist_autograd {
namespace {

using torch::autograd::AccumulateGrad;
using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;

// The sinks of the graph below some roots, as engine output edges.
struct Sinks {
  edge_list outputs;
  std::vector<at::Tensor> leaves;  // leaves[i] belongs to outputs[i]
  std::vector<AccumulateGrad*> accumulators;  // of leaves[i], or null
  // Recv functions, each with its first index in `outputs` (its inputs'
  // edges follow in order).
  std::vector<std::pair<std::shared_ptr<RecvRpcBackward>, size_t>> recvs;
};

Sinks FindSinks(const edge_list& roots) {
  Sinks sinks;
  std::unordered_set<const Node*> seen;
  std::vector<Node*> stack;
  auto visit = [&](const Edge& edge) {
    if (!edge.is_valid() || !seen.insert(edge.function.get()).second) return;
    if (auto* accumulate = dynamic_cast<AccumulateGrad*>(edge.function.get())) {
      sinks.outputs.emplace_back(edge.function, 0);
      sinks.leaves.push_back(accumulate->variable);
      sinks.accumulators.push_back(accumulate);
    } else if (auto recv = std::dynamic_pointer_cast<RecvRpcBackward>(edge.function)) {
      sinks.recvs.emplace_back(recv, sinks.outputs.size());
      for (uint32_t i = 0; i < recv->num_inputs(); ++i) {
        sinks.outputs.emplace_back(recv, i);
        sinks.leaves.emplace_back();
        sinks.accumulators.push_back(nullptr);
      }
    } else {
      stack.push_back(edge.function.get());
    }
  };
  for (const auto& root : roots) visit(root);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) visit(edge);
  }
  return sinks;
}

// The context as the gradient sink of one pass (gradient_sink.h).
class ContextSink final : public GradientSink {
 public:
  explicit ContextSink(Context& context) : context_(context) {}
  at::Tensor Get(const at::Tensor& variable) override { return context_.Grad(variable); }
  void Set(const at::Tensor& variable, const at::Tensor& grad) override {
    context_.SetGrad(variable, grad);
  }
  void AtPassEnd(std::function<void()> fn) override { at_end_.push_back(std::move(fn)); }

  void RunAtPassEnd() {
    for (auto& fn : at_end_) fn();
  }

 private:
  Context& context_;
  std::vector<std::function<void()>> at_end_;
};

// Adds the captured leaf gradients to the context, then runs the
// accumulators' post hooks as a plain backward would (DDP's reducer).
absl::Status DeliverLeafGradients(Context& context, const Sinks& sinks,
                                  const std::vector<at::Tensor>& captured) {
  ContextSink sink(context);
  GradientSinkScope scope(&sink);
  try {
    for (size_t i = 0; i < sinks.leaves.size(); ++i) {
      if (!sinks.leaves[i].defined() || !captured[i].defined()) continue;
      context.AccumulateGrad(sinks.leaves[i], captured[i]);
      for (const auto& hook : sinks.accumulators[i]->post_hooks()) {
        (*hook)(/*outputs=*/{}, /*inputs=*/{captured[i]});
      }
    }
    sink.RunAtPassEnd();
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("a gradient hook failed: ") + e.what());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RecvGradients>> RunLocalPass(Context& context,
                                                        const edge_list& roots,
                                                        const std::vector<at::Tensor>& grads,
                                                        bool keep_graph) {
  Sinks sinks = FindSinks(roots);
  // Nothing to compute for; and with no outputs the engine would run the
  // accumulators themselves, writing .grad.
  if (sinks.outputs.empty()) return std::vector<RecvGradients>{};
  std::vector<at::Tensor> captured;
  try {
    captured = torch::autograd::Engine::get_default_engine().execute(
        roots, grads, keep_graph, /*create_graph=*/false, /*accumulate_grad=*/false,
        sinks.outputs);
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("local backward pass failed: ") + e.what());
  }
  if (auto delivered = DeliverLeafGradients(context, sinks, captured); !delivered.ok()) {
    return delivered;
  }
  std::vector<RecvGradients> to_send;
  for (const auto& [recv, first] : sinks.recvs) {
    RecvGradients entry{recv, {}};
    bool any = false;
    for (uint32_t i = 0; i < recv->num_inputs(); ++i) {
      const at::Tensor& grad = captured[first + i];
      any = any || grad.defined();
      entry.grads.push_back(grad.defined() ? grad : recv->input_metadata(i).zeros_like());
    }
    // No gradient reached it at all: the sender has nothing to compute.
    if (any) to_send.push_back(std::move(entry));
  }
  return to_send;
}

}  // namespace tessera::dist_autograd
