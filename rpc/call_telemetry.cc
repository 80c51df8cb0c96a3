#include "rpc/call_telemetry.h"

#include "absl/strings/match.h"
#include "common/metrics.h"
#include "rpc/agent_support.h"

namespace tessera::rpc {
namespace {

// The row a call is drawn on, and its category.
std::pair<trace::Track, const char*> RowOf(const proto::Envelope& envelope, bool outgoing) {
  const bool internal = envelope.kind() == proto::INTERNAL_CALL;
  if (internal && absl::StartsWith(envelope.target(), "rref.")) {
    return {trace::Track::kRRef, "rref"};
  }
  if (internal && absl::StartsWith(envelope.target(), "dist_autograd.")) {
    return {trace::Track::kAutograd, "autograd"};
  }
  return {outgoing ? trace::Track::kCallsOut : trace::Track::kCallsIn,
          internal ? "rpc.internal" : "rpc"};
}

absl::Status StatusOf(const absl::StatusOr<Message>& response) {
  if (!response.ok()) return response.status();
  const proto::Status& status = response->envelope.status();
  if (status.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

}  // namespace

std::shared_ptr<OutgoingCall> OutgoingCall::Start(const std::string& to, Message* request) {
  if (!CallTelemetryEnabled()) return nullptr;
  auto call = std::make_shared<OutgoingCall>();
  call->function_ = request->envelope.target();
  call->started_ = absl::Now();
  if (metrics::Enabled()) call->bytes_ = MessageBytes(*request);
  if (trace::Enabled()) {
    auto [track, category] = RowOf(request->envelope, /*outgoing=*/true);
    call->span_ = trace::Span::Begin(track, category, call->function_);
    call->span_.Arg("to", to);
    const uint64_t flow = trace::NewFlowId();
    call->span_.FlowOut(flow);
    request->envelope.set_trace_id(flow);
  }
  return call;
}

void OutgoingCall::Finish(const absl::StatusOr<Message>& response) {
  const absl::Status status = StatusOf(response);
  metrics::RecordCallOut(function_, status, bytes_, absl::Now() - started_);
  if (!status.ok()) span_.Arg("status", absl::StatusCodeToString(status.code()));
  span_.End();
}

std::shared_ptr<IncomingCall> IncomingCall::Start(const std::string& from, const Message& request) {
  if (!CallTelemetryEnabled()) return nullptr;
  auto call = std::make_shared<IncomingCall>();
  call->function_ = request.envelope.target();
  const double now = trace::NowMicros();
  call->received_us_ = request.received_us > 0 ? std::min(request.received_us, now) : now;
  if (trace::Enabled()) {
    auto [track, category] = RowOf(request.envelope, /*outgoing=*/false);
    trace::Span queued =
        trace::Span::Begin(track, category, call->function_ + " (queued)", call->received_us_);
    queued.Arg("from", from);
    if (request.envelope.trace_id() != 0) queued.FlowIn(request.envelope.trace_id());
    call->span_ = queued.EndAndBegin(call->function_);
    call->span_.Arg("from", from);
  }
  return call;
}

void IncomingCall::Finish(const absl::StatusOr<Message>& response) {
  const absl::Status status = response.status();
  const uint64_t bytes = response.ok() && metrics::Enabled() ? MessageBytes(*response) : 0;
  metrics::RecordCallIn(function_, status, bytes,
                        absl::Microseconds(trace::NowMicros() - received_us_));
  if (!status.ok()) span_.Arg("status", absl::StatusCodeToString(status.code()));
  span_.End();
}

}  // namespace tessera::rpc
