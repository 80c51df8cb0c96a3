#include "collectives/collective_checks.h"

#include <ATen/ops/empty.h>

#include <atomic>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/collective_fingerprint.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace tessera::collectives {
namespace {

class CheckedProcessGroup final : public ProcessGroup {
 public:
  CheckedProcessGroup(std::unique_ptr<ProcessGroup> inner, absl::Duration timeout)
      : ProcessGroup(Wrapping{}), inner_(std::move(inner)), wait_bound_(2 * timeout) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

 protected:
  Work DoAllreduce(at::Tensor tensor, ReduceOp op) override {
    return Checked(Fingerprint(CollectiveKind::kAllreduce, static_cast<int64_t>(op), tensor),
                   [this, tensor, op] { return inner_->Allreduce(tensor, op); });
  }
  Work DoBroadcast(at::Tensor tensor, int root) override {
    return Checked(Fingerprint(CollectiveKind::kBroadcast, root, tensor),
                   [this, tensor, root] { return inner_->Broadcast(tensor, root); });
  }
  Work DoBarrier() override {
    return Checked(Fingerprint(CollectiveKind::kBarrier, 0), [this] { return inner_->Barrier(); });
  }
  Work DoAllgather(at::Tensor input, at::Tensor output) override {
    return Checked(Fingerprint(CollectiveKind::kAllgather, 0, input, output),
                   [this, input, output] { return inner_->Allgather(input, output); });
  }
  Work DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    return Checked(
        Fingerprint(CollectiveKind::kReduceScatter, static_cast<int64_t>(op), input, output),
        [this, input, output, op] { return inner_->ReduceScatter(input, output, op); });
  }
  Work DoSend(at::Tensor tensor, int dst, uint64_t tag) override {
    return inner_->Send(std::move(tensor), dst, tag);
  }
  Work DoRecv(at::Tensor tensor, int src, uint64_t tag) override {
    return inner_->Recv(std::move(tensor), src, tag);
  }

 private:
  // Queues the call: calls are checked and run one at a time, in issue
  // order, so every rank pairs its n-th exchange with the others' n-th.
  Work Checked(at::Tensor fingerprint, std::function<Work()> issue) {
    Promise<std::monostate> done;
    const uint64_t call = ++calls_;
    serial_.Post([this, done, call, fingerprint = std::move(fingerprint),
                  issue = std::move(issue)]() mutable {
      const absl::Status status = ExchangeThenRun(call, fingerprint, issue);
      // Tensors released before completion, as in the backends.
      issue = nullptr;
      fingerprint.reset();
      CompleteWork(done, status);
    });
    return done.GetFuture();
  }

  // Every rank sees every fingerprint, so all ranks decide alike: run the
  // call everywhere or nowhere.
  absl::Status ExchangeThenRun(uint64_t call, const at::Tensor& fingerprint,
                               const std::function<Work()>& issue) {
    at::Tensor gathered = at::empty({size() * kFingerprintWords}, at::kLong);
    auto exchanged = inner_->Allgather(fingerprint, gathered).Wait(wait_bound_);
    if (!exchanged.ok()) {
      return Annotate(
          exchanged.status(),
          absl::StrCat("comparing collective #", call, " (",
                       DescribeFingerprint(fingerprint.data_ptr<int64_t>()), ") across ranks"));
    }
    TESSERA_RETURN_IF_ERROR(CompareFingerprints(gathered, call));
    return issue().Wait(wait_bound_).status();
  }

  const std::unique_ptr<ProcessGroup> inner_;
  const absl::Duration wait_bound_;
  std::atomic<uint64_t> calls_{0};
  // Last member: drained and joined first, while inner_ lives.
  ThreadPool serial_{1, "pg-checks"};
};

}  // namespace

std::unique_ptr<ProcessGroup> WithCollectiveChecks(std::unique_ptr<ProcessGroup> inner,
                                                   absl::Duration timeout) {
  return std::make_unique<CheckedProcessGroup>(std::move(inner), timeout);
}

}  // namespace tessera::collectives
