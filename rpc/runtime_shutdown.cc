// The runtime's graceful shutdown: the agreement that nothing is in flight
// (rpc/quiescence.h), the liveness probes of workers that have not arrived
// (rpc/shutdown_prober.h), then closing the agent, the pool and the store.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rpc/quiescence.h"
#include "rpc/runtime.h"
#include "rpc/shutdown_prober.h"

namespace tessera::rpc {
namespace {

// The liveness probe (see Note [Shutdown liveness], rpc/shutdown_prober.h).
struct PingRequest {
  static constexpr const char* kService = services::kPing;
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  auto Fields() { return std::tie(); }
};

}  // namespace

void Runtime::ServeLivenessProbes() {
  Serve<PingRequest>(internal_, [](CallContext&, PingRequest) { return true; });
}

void Runtime::Shutdown(bool graceful) { ThrowIfError(TryShutdown(graceful)); }

std::string Runtime::DescribeWorker(int rank) const {
  if (std::string name; membership_.NameAndRole(rank, &name)) {
    return absl::StrCat("worker '", name, "' (rank ", rank, ")");
  }
  return absl::StrCat("rank ", rank);
}

absl::Status Runtime::TryShutdown(bool graceful) {
  {
    MutexLock lock(&shutdown_mu_);
    if (shut_down_) return absl::OkStatus();
    shut_down_ = true;
  }
  absl::Status status;
  if (agent_ != nullptr && graceful) {
    const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
    ShutdownProber prober(
        options_, *store_client_, membership_,
        [this](int rank, absl::Duration timeout) {
          return CallService(rank, PingRequest{}, CallOptions{timeout});
        },
        [this](int rank) { return DescribeWorker(rank); });
    auto probe = [&prober](const std::vector<int>& missing) {
      return prober.ProbeMissing(missing);
    };
    auto participants = [this] { return ShutdownParticipants(); };
    status = AgreeQuiescent(*store_client_, options_.store_prefix + "/shutdown", options_.rank,
                            participants, *agent_, deadline, probe);
    if (status.ok() && !extensions_.empty()) {
      // Second phase: references held across workers are released now that
      // nobody can make new ones, and the releases drain before the check.
      for (const auto& extension : extensions_) extension->ReleaseReferences();
      status = AgreeQuiescent(*store_client_, options_.store_prefix + "/release", options_.rank,
                              participants, *agent_, deadline, probe);
      for (const auto& extension : extensions_) {
        if (!status.ok()) break;
        status = extension->CheckReleased();
      }
    }
    // Agreed: from here on, peers closing their connections is expected,
    // not a failure (no membership event for it).
    if (status.ok()) shutting_down_.store(true);
    if (status.ok() && store_server_ != nullptr) {
      // The hosting rank keeps the store up until everyone has read the
      // final round; each worker says so before it closes.
      status = store_client_->Set(
          absl::StrCat(options_.store_prefix, "/shutdown/done/", options_.rank), "1");
      std::vector<std::string> keys;
      for (int r : ShutdownParticipants()) {
        keys.push_back(absl::StrCat(options_.store_prefix, "/shutdown/done/", r));
      }
      if (status.ok()) status = store_client_->Wait(keys, deadline - absl::Now());
    } else if (status.ok()) {
      status = store_client_->Set(
          absl::StrCat(options_.store_prefix, "/shutdown/done/", options_.rank), "1");
    }
    if (!status.ok()) {
      TESSERA_LOG(WARNING) << options_.name
                           << ": graceful shutdown incomplete, closing anyway: " << status;
    }
  }
  // Until now a worker waiting in shutdown still serves, and must still
  // hear of dead peers; from here on, connections closing are expected.
  shutting_down_.store(true);
  if (agent_ != nullptr) {
    agent_->Close(absl::CancelledError("RPC runtime of '" + options_.name +
                                       "' shut down before the call completed"));
  }
  PrintMetrics();
  // Drains queued callbacks (they may still post) and joins the threads. The
  // pool object lives on until the destructor: a timer callback that read
  // live_pool_ just before it was cleared may still post to it.
  if (pool_ != nullptr) pool_->Shutdown();
  live_pool_.store(nullptr, std::memory_order_release);
  for (const auto& extension : extensions_) extension->OnClosed();
  if (store_server_ != nullptr) store_server_->Shutdown();
  return status;
}

}  // namespace tessera::rpc
