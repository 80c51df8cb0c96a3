// The autograd nodes that distributed autograd records where tensors cross
// workers (see Note [Distributed autograd] in dist_autograd.h).
//
// SendRpcBackward sits on the sending worker: its inputs are the tensors of
// one message that require grad, its next edges their gradient edges. When
// the receiver's backward reaches the matching RecvRpcBackward, the
// gradients come back over RPC and the local engine runs from here.
//
// RecvRpcBackward sits on the receiving worker: the message's tensors that
// require grad become its outputs (their grad_fn). The distributed engine
// captures the gradients that reach it and ships them to the sender; it is
// never applied itself — a plain local backward that reaches it fails with
// an error saying to use dist_autograd's Backward.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::dist_autograd {

class SendRpcBackward final : public torch::autograd::Node {
 public:
  // `sent`: the message's tensors that require grad, in message order.
  explicit SendRpcBackward(const std::vector<at::Tensor>& sent);

  // Identity: the gradients received from the peer flow to the next edges.
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return "tessera::dist_autograd::SendRpcBackward"; }
};

class RecvRpcBackward final : public torch::autograd::Node {
 public:
  // The tensors came from `from_rank`, recorded there as send function
  // `peer_send_id` of context `context_id`.
  RecvRpcBackward(int64_t context_id, int from_rank, int64_t peer_send_id);

  // Makes `received` (the message's tensors that require grad, in message
  // order) outputs of this node; they must be fresh tensors without history.
  void Attach(const std::vector<at::Tensor>& received);

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return "tessera::dist_autograd::RecvRpcBackward"; }

  int64_t context_id() const { return context_id_; }
  int from_rank() const { return from_rank_; }
  int64_t peer_send_id() const { return peer_send_id_; }

 private:
  const int64_t context_id_;
  const int from_rank_;
  const int64_t peer_send_id_;
};

}  // namespace tessera::dist_autograd
