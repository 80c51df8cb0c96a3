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
// Each Step (Note [Quorum per step], quorum.h): the live replicas agree on
// a quorum through the store, with a deadline (a replica that died is left
// out once the deadline passes); when the quorum differs from the last
// one, the Gloo group is formed again over its members; a member behind
// the others (restarted, or new) first receives the current parameters,
// buffers and optimizer state by broadcast from a live peer that is up to
// date — no checkpoint is read. Then forward and backward run locally, the
// gradients are averaged over the quorum's members, and the optimizer step
// is applied only if every member's part succeeded (a commit decided once,
// through the store): a replica dying mid-step makes every survivor drop
// that step and retry it in a quorum without the dead one. Replicas with
// the same committed step count hold identical parameters, whatever
// partitions the job went through (Note [No split brain], quorum.h): a
// replica cut off from the others commits nothing alone and, when the link
// heals, catches up from them.
//
// Thread-safety: one training thread per replica.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ddp/fault_tolerant/quorum.h"
#include "ddp/gloo/gloo_process_group.h"
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
  GlooOptions gloo;
};

struct FaultTolerantStep {
  bool committed = false;  // false: dropped (a member failed), to be retried
  int replicas = 0;        // members of the step's quorum
  bool recovered = false;  // this replica received the state from a peer
  double loss = 0;         // what forward_backward returned (if it ran)
  // Time spent agreeing (the quorum and the commit vote), the cost of fault
  // tolerance over plain DDP.
  absl::Duration coordination;
};

class FaultTolerantDdp {
 public:
  // `store` (the job's; a launcher must host it: a replica's death must not
  // take it away), `model` and `optimizer` must outlive this.
  FaultTolerantDdp(store::StoreClient* store, torch::nn::Module& model,
                   torch::optim::Optimizer& optimizer, FaultTolerantOptions options);
  ~FaultTolerantDdp();

  // One step: quorum, re-forming and recovery if needed, then
  // `forward_backward` (gradients into .grad; returns the loss), averaged
  // gradients and the optimizer step if committed. A store out of reach
  // and quorums too small to commit are waited out; throws StatusError when
  // that lasts QuorumOptions::rejoin_timeout (Note [No split brain]).
  FaultTolerantStep Step(const std::function<double()>& forward_backward);
  // Steps committed so far (by this replica or, after a recovery, the peer
  // it recovered from).
  int64_t step() const { return step_; }

 private:
  void FormGroup(const QuorumRound& round);
  // Broadcasts parameters, buffers, optimizer state and step count from the
  // first member with the most steps.
  void Recover(const QuorumRound& round);
  void AverageGradients();

  store::StoreClient* const store_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  const FaultTolerantOptions options_;
  Quorum quorum_;
  std::unique_ptr<ProcessGroup> group_;
  bool group_broken_ = false;  // a step failed on it: form a new one
  int64_t step_ = 0;
};

}  // namespace tessera::ddp
