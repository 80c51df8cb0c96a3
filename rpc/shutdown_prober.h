// ShutdownProber: while a graceful shutdown waits for workers that have
// not arrived, whether each is alive, excused (restarting, leaving, not yet
// joined, on a node the launchers may yet declare lost) or gone (see Note
// [Shutdown liveness]). Made by Runtime::TryShutdown for the one shutdown
// and used only by its thread; its memory of each rank (probes unanswered,
// since when it is restarting or silent) lasts that shutdown.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/future.h"
#include "rpc/membership.h"
#include "rpc/rpc_options.h"
#include "store/store_client.h"

namespace tessera::rpc {

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
class ShutdownProber {
 public:
  // Pings `rank`, answering within `timeout`.
  using Ping = std::function<Future<bool>(int rank, absl::Duration timeout)>;
  // A rank as errors name it ("worker 'ps1' (rank 1)").
  using Describe = std::function<std::string(int rank)>;

  // `options`, `store` and `membership` are the runtime's and outlive this.
  ShutdownProber(const RpcOptions& options, store::StoreClient& store, const Membership& membership,
                 Ping ping, Describe describe);

  // Probes `ranks` (this worker's own skipped): OK while each answered or
  // is excused; Unavailable naming one that is gone, DeadlineExceeded
  // naming one silent for kProbesBeforeGivingUp probes in a row.
  absl::Status ProbeMissing(const std::vector<int>& ranks);

  static constexpr int kProbesBeforeGivingUp = 3;
  static constexpr absl::Duration kProbeTimeout = absl::Seconds(10);

 private:
  // Whether `rank`'s silence is expected (see Note [Elastic membership],
  // rpc/runtime.h): it left, is being restarted, was handed out to a
  // joining worker not yet announced, or is of an elastic role whose node
  // the launchers may still declare lost.
  bool AbsenceExcused(int rank);

  const RpcOptions& options_;
  store::StoreClient& store_;
  const Membership& membership_;
  const Ping ping_;
  const Describe describe_;
  // Consecutive unanswered probes per rank.
  std::map<int, int> unanswered_probes_;
  // When a rank was first seen being restarted.
  std::map<int, absl::Time> restarting_since_;
  // When a rank handed out to a joining worker, and not yet announced, was
  // first probed (it is starting: loading, meeting the store).
  std::map<int, absl::Time> joining_since_;
  // When a rank of an elastic role first failed to answer (its node may be
  // lost: see Note [Lost nodes]); the launcher's verdict takes a beat or two
  // beyond --node_timeout.
  std::map<int, absl::Time> silent_since_;
  static constexpr absl::Duration kNodeVerdictSlack = absl::Seconds(5);
};

}  // namespace tessera::rpc
