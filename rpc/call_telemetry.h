// What a call records when tracing or metrics are on (see Note [Tracing],
// common/trace.h; see Note [Metrics], common/metrics.h).
//
// Note [Call telemetry]: the caller's span runs from the send to the
// response and starts a flow whose id travels in Envelope.trace_id; the
// callee's spans are "<function> (queued)", from the moment its agent has
// the whole request (Message::received_us) to a pool thread taking it up,
// then "<function>" until the response is ready, and end the flow. Internal
// services of RRefs and distributed autograd are drawn on their own rows.
// Both sides count the call in the metrics: function, status, bytes, time.
// Off, the runtime makes no record: Start() returns nullptr after two
// relaxed atomic loads.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/trace.h"
#include "rpc/message.h"

namespace tessera::rpc {

// Whether calls are recorded at all: inline, for the call path when off.
inline bool CallTelemetryEnabled() { return trace::Enabled() || metrics::Enabled(); }

class OutgoingCall {
 public:
  // Begins the caller's record of `request` to worker `to`, stamping its
  // flow id into the envelope; nullptr when nothing records.
  static std::shared_ptr<OutgoingCall> Start(const std::string& to, Message* request);
  // The call ended with `response` (its remote status included).
  void Finish(const absl::StatusOr<Message>& response);

 private:
  std::string function_;
  uint64_t bytes_ = 0;
  absl::Time started_;
  trace::Span span_;
};

class IncomingCall {
 public:
  // Begins the callee's record of `request` from worker `from`.
  static std::shared_ptr<IncomingCall> Start(const std::string& from, const Message& request);
  void Finish(const absl::StatusOr<Message>& response);

 private:
  std::string function_;
  double received_us_ = 0;
  trace::Span span_;
};

}  // namespace tessera::rpc
