#include "ddp/traced_process_group.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/trace.h"

namespace tessera::ddp {
namespace {

class TracedProcessGroup final : public ProcessGroup {
 public:
  explicit TracedProcessGroup(std::unique_ptr<ProcessGroup> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  Work Allreduce(at::Tensor tensor, ReduceOp op) override {
    const int64_t bytes = tensor.nbytes();
    return Traced("allreduce", bytes, -1, [&] { return inner_->Allreduce(tensor, op); });
  }
  Work Broadcast(at::Tensor tensor, int root) override {
    const int64_t bytes = tensor.nbytes();
    return Traced("broadcast", bytes, root, [&] { return inner_->Broadcast(tensor, root); });
  }
  Work Barrier() override {
    return Traced("barrier", 0, -1, [&] { return inner_->Barrier(); });
  }
  Work Allgather(at::Tensor input, at::Tensor output) override {
    const int64_t bytes = output.nbytes();
    return Traced("allgather", bytes, -1, [&] { return inner_->Allgather(input, output); });
  }
  Work ReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    const int64_t bytes = input.nbytes();
    return Traced("reduce_scatter", bytes, -1,
                  [&] { return inner_->ReduceScatter(input, output, op); });
  }
  Work Send(at::Tensor tensor, int dst, uint64_t tag) override {
    const int64_t bytes = tensor.nbytes();
    return Traced("send", bytes, dst, [&] { return inner_->Send(tensor, dst, tag); });
  }
  Work Recv(at::Tensor tensor, int src, uint64_t tag) override {
    const int64_t bytes = tensor.nbytes();
    return Traced("recv", bytes, src, [&] { return inner_->Recv(tensor, src, tag); });
  }

 private:
  template <typename Start>
  Work Traced(const char* op, int64_t bytes, int peer, Start start) {
    auto span = std::make_shared<trace::Span>(
        trace::Span::Begin(trace::Track::kCollectives, "collective", op));
    span->Arg("bytes", bytes);
    if (peer >= 0) span->Arg("peer", peer);
    const absl::Time started = absl::Now();
    Work work = start();
    work.OnReady([span, op, started](const absl::StatusOr<std::monostate>& done) {
      metrics::RecordCollective(op, absl::Now() - started);
      if (!done.ok()) span->Arg("status", absl::StatusCodeToString(done.status().code()));
      span->End();
    });
    return work;
  }

  const std::unique_ptr<ProcessGroup> inner_;
};

}  // namespace

std::unique_ptr<ProcessGroup> WithTracing(std::unique_ptr<ProcessGroup> inner) {
  // A job of process groups alone (no RPC runtime to start them) traces
  // and counts as its environment says, to rank<r>.json.
  const int rank = inner->rank();
  if (absl::Status traced = trace::StartFromEnvironment(absl::StrCat("rank", rank), rank);
      !traced.ok()) {
    TESSERA_LOG(WARNING) << "rank " << rank << " is not traced: " << traced;
  }
  metrics::EnableFromEnvironment();
  if (!trace::Enabled() && !metrics::Enabled()) return inner;
  return std::make_unique<TracedProcessGroup>(std::move(inner));
}

}  // namespace tessera::ddp
