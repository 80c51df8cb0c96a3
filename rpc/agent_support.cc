#include "rpc/agent_support.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/trace.h"

namespace tessera::rpc {

void StampRequest(uint64_t request_id, int self_rank, absl::Time deadline,
                  proto::Envelope* envelope) {
  if (deadline != absl::InfiniteFuture()) {
    envelope->set_timeout_us(
        std::max<int64_t>(1, absl::ToInt64Microseconds(deadline - absl::Now())));
  }
  envelope->set_request_id(request_id);
  envelope->set_origin_rank(self_rank);
}

uint64_t MessageBytes(const Message& message) {
  uint64_t bytes = message.envelope.ByteSizeLong();
  for (const at::Tensor& tensor : message.tensors) bytes += tensor.nbytes();
  return bytes;
}

void RequestService::Serve(int from_rank, Message request,
                           std::function<void(Message response)> respond) {
  if (trace::Enabled() || metrics::Enabled()) request.received_us = trace::NowMicros();
  const uint64_t request_id = request.envelope.request_id();
  const bool admitted = request.envelope.kind() == proto::CALL;  // internal calls: never refused
  if (admitted && !admission_.TryAdmit()) {
    respond(ResponseTo(request_id, admission_.Refusal(self_name_), self_name_, self_rank_));
    return;
  }
  executor_->Post([this, from_rank, request_id, admitted, respond = std::move(respond),
                   request = std::move(request)]() mutable {
    handler_(from_rank, std::move(request))
        .OnReady([this, request_id, admitted,
                  respond = std::move(respond)](const absl::StatusOr<Message>& result) {
          if (admitted) admission_.Finished();
          respond(ResponseTo(request_id, result, self_name_, self_rank_));
        });
  });
}

Message ResponseTo(uint64_t request_id, const absl::StatusOr<Message>& result,
                   const std::string& self_name, int self_rank) {
  Message response;
  if (result.ok()) {
    response = *result;
  } else {
    auto* status = response.envelope.mutable_status();
    status->set_code(static_cast<int>(result.status().code()));
    status->set_message(std::string(result.status().message()));
    status->set_origin_worker(self_name);
  }
  response.envelope.set_kind(proto::RESPONSE);
  response.envelope.set_request_id(request_id);
  response.envelope.set_origin_rank(self_rank);
  return response;
}

std::string DescribeWorker(int rank, const std::vector<WorkerInfo>& workers) {
  if (rank >= 0 && rank < static_cast<int>(workers.size())) {
    return absl::StrCat("'", workers[rank].name, "' (rank ", rank, ")");
  }
  return absl::StrCat("rank ", rank);
}

std::string DescribeWorkerAt(int rank, const std::vector<WorkerInfo>& workers) {
  if (rank >= 0 && rank < static_cast<int>(workers.size())) {
    return absl::StrCat(DescribeWorker(rank, workers), " at ", workers[rank].address,
                        " (the address it published at rendezvous)");
  }
  return DescribeWorker(rank, workers);
}

absl::Status ConnectionEnded(const std::string& peer, const absl::Status& why) {
  if (absl::IsUnauthenticated(why)) {
    return absl::UnauthenticatedError(
        absl::StrCat("connection refused by worker ", peer, ": ", why.message()));
  }
  return absl::UnavailableError(absl::StrCat("worker ", peer, " is unavailable: ", why.message()));
}

}  // namespace tessera::rpc
