// FaultTolerantDdp: data-parallel training whose replicas may die and come
// back while the others train on — torchft's fault-tolerant DDP, in C++
// over Tessera's store and Gloo. Opt-in: DistributedDataParallel is
// unchanged; this is a separate wrapper for jobs that want it.
//
//   FaultTolerantDdp ft(store, model, optimizer, {"replica" + rank, quorum});
//   while (ft.step() < steps) {
//     auto result = ft.Step([&] { auto loss = loss_of(model(x), y); loss.backward();
//                                 return loss.item<double>(); });
//   }
//
// Each Step (see Note [Quorum per step], quorum.h): the live replicas agree on
// a quorum through the store, with a deadline (a replica that died is left
// out once the deadline passes) — on a thread of its own, while forward and
// backward run (torchft's asynchronous quorum), so that a step waits only
// for what is left of the agreement. When the quorum differs from the last
// one, the Gloo group is formed again over its members; a member behind
// the others (restarted, or new) receives the current parameters, buffers
// and optimizer state by broadcast from a live peer that is up to date — no
// checkpoint is read — and its gradients, computed on the old parameters,
// count for nothing: the average is over the up-to-date members. Then the
// gradients are averaged over the quorum, and a member whose collective
// completed claims the step through the store (one compare-and-set) and
// applies the optimizer step if its round holds the claim. A replica dying
// mid-step makes the survivors whose collective failed drop that step and
// retry it in a quorum without the dead one (those whose collective had
// completed commit it, and the others recover from them). Replicas with
// the same committed step count hold identical parameters, whatever
// partitions the job went through (see Note [No split brain], quorum.h): a
// replica cut off from the others commits nothing alone and, when the link
// heals, catches up from them.
//
// Thread-safety: one training thread per replica.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collectives/gloo/gloo_process_group.h"
#include "ddp/fault_tolerant/quorum.h"
#include "store/store_client.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace tessera::ddp {

struct FaultTolerantOptions {
  // Unique and stable across restarts of the same replica ("replica<RANK>").
  std::string replica_id;
  QuorumOptions quorum;
  // The groups formed over each quorum (their timeout bounds a collective
  // with a member that died without closing its connections).
  collectives::GlooOptions gloo;
};

struct FaultTolerantStep {
  bool committed = false;  // false: dropped (a member failed), to be retried
  int replicas = 0;        // members of the step's quorum
  bool recovered = false;  // this replica received the state from a peer
  int64_t step = 0;        // the step taken (steps committed before it, recovery included)
  double loss = 0;         // what forward_backward returned (if it ran)
  // Time the step waited to agree (what was left of the quorum after
  // forward and backward, and the claim), the cost of fault tolerance over
  // plain DDP.
  absl::Duration coordination;
};

class FaultTolerantDdp {
 public:
  // `store` (the job's; a launcher must host it: a replica's death must not
  // take it away), `model` and `optimizer` must outlive this.
  FaultTolerantDdp(store::StoreClient* store, torch::nn::Module& model,
                   torch::optim::Optimizer& optimizer, FaultTolerantOptions options);
  ~FaultTolerantDdp();

  // One step: `forward_backward` (gradients into .grad; returns the loss)
  // while the quorum is agreed, re-forming and recovery if needed, averaged
  // gradients and the optimizer step if committed. A replica that recovers
  // took its peer's step count only after `forward_backward` ran. A store out of reach
  // and quorums too small to commit are waited out; throws StatusError when
  // that lasts QuorumOptions::rejoin_timeout (see Note [No split brain]).
  FaultTolerantStep Step(const std::function<double()>& forward_backward);
  // Steps committed so far (by this replica or, after a recovery, the peer
  // it recovered from).
  int64_t step() const { return step_; }

 private:
  void FormGroup(const QuorumRound& round);
  // Broadcasts parameters, buffers, optimizer state and step count from the
  // first member with the most steps.
  void Recover(const QuorumRound& round);
  // Averages the gradients over the round's up-to-date members; one that
  // was behind (`contribute` false) adds zeros.
  void AverageGradients(const QuorumRound& round, bool contribute);

  store::StoreClient* const store_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  const FaultTolerantOptions options_;
  Quorum quorum_;
  std::unique_ptr<collectives::ProcessGroup> group_;
  bool group_broken_ = false;  // a step failed on it: form a new one
  int64_t step_ = 0;
};

}  // namespace tessera::ddp
