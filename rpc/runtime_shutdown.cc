// The runtime's graceful shutdown: the agreement that nothing is in flight
// (rpc/quiescence.h), the liveness probes of workers that have not arrived,
// then closing the agent, the pool and the store.
#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/logging.h"
#include "rpc/quiescence.h"
#include "rpc/runtime.h"

namespace tessera::rpc {
namespace {

// Note [Shutdown liveness]: a graceful shutdown waits for every worker to
// arrive, which may take hours (a parameter server shuts down as soon as it
// has started serving; its trainers arrive when they are done training).
// While some have not arrived, one waiting worker (the lowest rank that
// has) probes them about once a second with an internal ping and tells the
// others through the store (rpc/quiescence.h): a worker that died refuses
// or resets the connection (Unavailable) and is reported by name at once;
// one that does not answer kProbesBeforeGivingUp probes in a row (a host
// cut off) is reported then. A busy worker answers: pings run on its pool,
// not on the thread that trains. One prober, not all: each probe may open
// a connection, and trainers that never talk to each other need none.
struct PingRequest {
  static constexpr const char* kService = services::kPing;
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  auto Fields() { return std::tie(); }
};
constexpr absl::Duration kProbeTimeout = absl::Seconds(10);

}  // namespace

void Runtime::ServeLivenessProbes() {
  Serve<PingRequest>(internal_, [](CallContext&, PingRequest) { return true; });
}

void Runtime::Shutdown(bool graceful) { ThrowIfError(TryShutdown(graceful)); }

absl::Status Runtime::ProbeMissing(const std::vector<int>& ranks) {
  std::vector<std::pair<int, Future<bool>>> probes;
  for (int rank : ranks) {
    if (rank == options_.rank) continue;
    probes.emplace_back(rank, CallService(rank, PingRequest{}, CallOptions{kProbeTimeout}));
  }
  for (auto& [rank, probe] : probes) {
    auto answer = AwaitCall(probe, kProbeTimeout);
    const std::string who = DescribeWorker(rank);
    if (answer.ok()) {
      unanswered_probes_.erase(rank);
      silent_since_.erase(rank);
    } else if (AbsenceExcused(rank)) {
      continue;  // restarting, or gone for good (see Note [Elastic membership])
    } else if (absl::IsUnavailable(answer.status())) {
      return absl::UnavailableError(
          absl::StrCat("graceful shutdown: ", who, " is gone (", answer.status().message(), ")"));
    } else if (++unanswered_probes_[rank] >= kProbesBeforeGivingUp) {
      return absl::DeadlineExceededError(
          absl::StrCat("graceful shutdown: ", who, " has not answered ", kProbesBeforeGivingUp,
                       " liveness probes (", absl::FormatDuration(kProbeTimeout),
                       " each): ", answer.status().message()));
    }
  }
  return absl::OkStatus();
}

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
    auto probe = [this](const std::vector<int>& missing) { return ProbeMissing(missing); };
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
