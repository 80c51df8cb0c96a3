#include "dist_autograd/local_pass.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <unordered_set>

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
    } else if (auto recv = std::dynamic_pointer_cast<RecvRpcBackward>(edge.function)) {
      sinks.recvs.emplace_back(recv, sinks.outputs.size());
      for (uint32_t i = 0; i < recv->num_inputs(); ++i) {
        sinks.outputs.emplace_back(recv, i);
        sinks.leaves.emplace_back();
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
  for (size_t i = 0; i < sinks.leaves.size(); ++i) {
    if (sinks.leaves[i].defined() && captured[i].defined()) {
      context.AccumulateGrad(sinks.leaves[i], captured[i]);
    }
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
