#include "dist_autograd/call_recorder.h"

#include <c10/core/ScalarType.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "dist_autograd/dist_autograd.h"

namespace tessera::dist_autograd {

// The serving side of a call made in a context: the handler runs with the
// context current, and its response is recorded in it.
class CallRecorder::Scope final : public rpc::ServeScope {
 public:
  Scope(CallRecorder* recorder, const DistAutograd* owner, std::shared_ptr<Context> context)
      : recorder_(recorder), owner_(owner), context_(std::move(context)) {}

  void Enter() override { entered_.emplace(*owner_, context_->id()); }
  void Exit() override { entered_.reset(); }
  absl::Status OnSendResponse(int /*to_rank*/, rpc::Message* response) override {
    return recorder_->RecordSend(*context_, response, /*is_response=*/true);
  }

 private:
  CallRecorder* const recorder_;
  const DistAutograd* const owner_;
  const std::shared_ptr<Context> context_;
  std::optional<ContextScope> entered_;
};

void CallRecorder::Attach(int self_rank, std::string self_name) {
  self_rank_ = self_rank;
  self_name_ = std::move(self_name);
}

absl::Status CallRecorder::RecordSend(Context& context, rpc::Message* message, bool is_response) {
  std::vector<at::Tensor> sent;
  for (size_t i = 0; i < message->tensors.size(); ++i) {
    if (!message->tensors[i].requires_grad()) continue;
    sent.push_back(message->tensors[i]);
    message->envelope.mutable_tensors(static_cast<int>(i))->set_requires_grad(true);
  }
  // A response needs no stamp unless it carries something to record; a
  // request always does, so that the callee's calls and response join in.
  if (is_response && sent.empty()) return absl::OkStatus();
  proto::AutogradMeta* meta = message->envelope.mutable_autograd();
  meta->set_context_id(context.id());
  if (!sent.empty()) {
    const int64_t send_id = next_send_id_.fetch_add(1);
    context.AddSend(send_id, std::make_shared<SendRpcBackward>(sent));
    meta->set_send_id(send_id);
  }
  return absl::OkStatus();
}

absl::Status CallRecorder::RecordRecv(Context& context, int from_rank,
                                      const rpc::Message& message) {
  const proto::AutogradMeta& meta = message.envelope.autograd();
  if (meta.send_id() == 0) return absl::OkStatus();
  if (message.tensors.size() != static_cast<size_t>(message.envelope.tensors_size())) {
    return absl::InvalidArgumentError("message tensors do not match their metadata");
  }
  // In message order, one per tensor the sender recorded: input i of the
  // recv function answers input i of the peer's send function.
  std::vector<at::Tensor> received;
  for (size_t i = 0; i < message.tensors.size(); ++i) {
    if (!message.envelope.tensors(static_cast<int>(i)).requires_grad()) continue;
    const at::Tensor& tensor = message.tensors[i];
    if (!c10::isFloatingType(tensor.scalar_type()) && !c10::isComplexType(tensor.scalar_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " of dtype ", c10::toString(tensor.scalar_type()),
                       " is marked as requiring grad; only floating-point tensors can"));
    }
    received.push_back(tensor);
  }
  if (received.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("message names send function ", meta.send_id(),
                                                   " but no tensor requires grad"));
  }
  auto recv = std::make_shared<RecvRpcBackward>(context.id(), from_rank, meta.send_id());
  recv->Attach(received);
  return absl::OkStatus();
}

absl::Status CallRecorder::OnSendRequest(int to_rank, rpc::Message* request) {
  const std::optional<int64_t> current = owner_->current_context();
  if (!current.has_value()) return absl::OkStatus();
  // Internal services are recorded only where their message type says they
  // carry user values (see Note [Typed internal services]): not the
  // reference-counting messages, nor this engine's own.
  if (request->envelope.kind() == proto::INTERNAL_CALL && !request->carries_user_values) {
    return absl::OkStatus();
  }
  auto context = contexts_->Find(*current);
  if (context == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("distributed autograd context ", *current,
                                                      " is current on this thread but was "
                                                      "already released on worker '",
                                                      self_name_, "'"));
  }
  if (to_rank != self_rank_) context->AddKnownWorker(to_rank);
  return RecordSend(*context, request, /*is_response=*/false);
}

absl::StatusOr<std::shared_ptr<rpc::ServeScope>> CallRecorder::OnReceiveRequest(
    int from_rank, const rpc::Message& request) {
  if (!request.envelope.has_autograd()) return nullptr;
  const int64_t context_id = request.envelope.autograd().context_id();
  if (context_id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid distributed autograd context id ", context_id));
  }
  auto context = contexts_->FindOrCreate(context_id);
  if (context == nullptr) {
    TESSERA_LOG(WARNING) << self_name_ << ": call in distributed autograd context " << context_id
                         << " arrived after its release; not recorded";
    return nullptr;
  }
  TESSERA_RETURN_IF_ERROR(RecordRecv(*context, from_rank, request));
  return std::make_shared<Scope>(this, owner_, std::move(context));
}

absl::Status CallRecorder::OnReceiveResponse(int from_rank, const rpc::Message& response) {
  if (!response.envelope.has_autograd() || response.envelope.autograd().send_id() == 0) {
    return absl::OkStatus();
  }
  auto context = contexts_->Find(response.envelope.autograd().context_id());
  if (context == nullptr) {
    TESSERA_LOG(WARNING) << self_name_ << ": response in distributed autograd context "
                         << response.envelope.autograd().context_id()
                         << " arrived after its release; not recorded";
    return absl::OkStatus();
  }
  return RecordRecv(*context, from_rank, response);
}

std::function<std::shared_ptr<void>()> CallRecorder::CaptureThreadState() {
  const std::optional<int64_t> id = owner_->current_context();
  if (!id.has_value()) return {};
  // The continuation runs while the runtime (and so this extension) lives.
  return [owner = owner_, id = *id]() -> std::shared_ptr<void> {
    return std::make_shared<ContextScope>(*owner, id);
  };
}

}  // namespace tessera::dist_autograd
