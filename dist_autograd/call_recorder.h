// CallRecorder: the recording half of distributed autograd (see Note
// [Distributed autograd], dist_autograd/dist_autograd.h) — the runtime's
// CallObserver. A message sent in a context carries its id; one that holds
// tensors requiring grad gets a send function recorded over them, and the
// tensors received a recv function naming (sender, send id).
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist_autograd/context.h"
#include "dist_autograd/context_table.h"
#include "rpc/runtime_extension.h"

namespace tessera::dist_autograd {

class DistAutograd;

class CallRecorder final : public rpc::CallObserver {
 public:
  // `owner` says which context is current on a thread; `contexts` are its.
  CallRecorder(const DistAutograd* owner, ContextTable* contexts)
      : owner_(owner), contexts_(contexts) {}

  // Who this worker is, for the messages it records and its errors.
  void Attach(int self_rank, std::string self_name);

  absl::Status OnSendRequest(int to_rank, rpc::Message* request) override;
  absl::StatusOr<std::shared_ptr<rpc::ServeScope>> OnReceiveRequest(
      int from_rank, const rpc::Message& request) override;
  absl::Status OnReceiveResponse(int from_rank, const rpc::Message& response) override;
  // Carries the current context to continuations (e.g. an RRef call that
  // waits for its fork to be confirmed).
  std::function<std::shared_ptr<void>()> CaptureThreadState() override;

 private:
  class Scope;

  // Stamps `message` with the context and records a send function over its
  // tensors that require grad (if any).
  absl::Status RecordSend(Context& context, rpc::Message* message, bool is_response);
  // Attaches a recv function to the received tensors that require grad.
  absl::Status RecordRecv(Context& context, int from_rank, const rpc::Message& message);

  const DistAutograd* const owner_;
  ContextTable* const contexts_;
  int self_rank_ = -1;
  std::string self_name_;  // set in Attach, before any call
  std::atomic<int64_t> next_send_id_{1};
};

}  // namespace tessera::dist_autograd
