#include "dist_autograd/rpc_functions.h"
#include "common/status.h"

#include <torch/csrc/autograd/variable.h>

#include <stdexcept>

namespace tessera::dist_autograd {

using torch::autograd::variable_list;

SendRpcBackward::SendRpcBackward(const std::vector<at::Tensor>& sent)
    : Node(torch::autograd::collect_next_edges(sent)) {
  for (const auto& tensor : sent) add_input_metadata(tensor);
}

variable_list SendRpcBackward::apply(variable_list&& grads) { return std::move(grads); }

RecvRpcBackward::RecvRpcBackward(int64_t context_id, int from_rank, int64_t peer_send_id)
    : context_id_(context_id), from_rank_(from_rank), peer_send_id_(peer_send_id) {}

void RecvRpcBackward::Attach(const std::vector<at::Tensor>& received) {
  for (const auto& tensor : received) {
    const uint32_t input_nr = add_input_metadata(tensor);
    torch::autograd::impl::set_gradient_edge(tensor, {shared_from_this(), input_nr});
  }
}

variable_list RecvRpcBackward::apply(variable_list&& /*grads*/) {
  throw StatusError(absl::FailedPreconditionError(
      "this tensor was received over RPC inside distributed autograd context " +
      std::to_string(context_id_) +
      ": its gradient belongs to another worker; run the backward pass with "
      "tessera::dist_autograd's Backward(context_id, roots), not a local backward()"));
}

}  // namespace tessera::dist_autograd
