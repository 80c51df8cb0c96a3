// A ProcessGroup whose collectives go through shared memory between ranks
// of one host and, when the job spans hosts, through a group of one leader
// per host (see Note [Hierarchical collectives] in the .cc). Point to point and
// the layouts the hierarchy does not cover go through the flat group.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "collectives/shm/host_layout.h"
#include "collectives/shm/shm_communicator.h"
#include "common/serial_queue.h"

namespace tessera::collectives {

class HierarchicalProcessGroup final : public ProcessGroup {
 public:
  // `local`: null when this rank is alone on its host. `leaders`: the group
  // of hosts' leaders (rank = host index) on a leader of a job of several
  // hosts, else null. `flat`: every rank of the job.
  HierarchicalProcessGroup(std::unique_ptr<ProcessGroup> flat,
                           std::unique_ptr<ShmCommunicator> local,
                           std::unique_ptr<ProcessGroup> leaders, HostLayout layout,
                           absl::Duration timeout);
  ~HierarchicalProcessGroup() override;

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }

 protected:
  Work DoAllreduce(at::Tensor tensor, ReduceOp op) override;
  Work DoBroadcast(at::Tensor tensor, int root) override;
  Work DoBarrier() override;
  Work DoAllgather(at::Tensor input, at::Tensor output) override;
  Work DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  Work DoSend(at::Tensor tensor, int dst, uint64_t tag) override;
  Work DoRecv(at::Tensor tensor, int src, uint64_t tag) override;

 private:
  Work Run(const char* what, std::function<absl::Status()> op);
  absl::Status AllreduceNow(const at::Tensor& tensor, ReduceOp op);
  absl::Status BroadcastNow(const at::Tensor& tensor, int root);
  absl::Status AllgatherNow(const at::Tensor& input, const at::Tensor& output);
  // Waits for a leaders' collective (bounded by the group's timeout).
  absl::Status Await(Work work) const;
  bool leader() const { return leaders_ != nullptr; }
  int host() const { return layout_.host_of_rank[rank()]; }

  const std::unique_ptr<ProcessGroup> flat_;
  const std::unique_ptr<ShmCommunicator> local_;
  const std::unique_ptr<ProcessGroup> leaders_;
  const HostLayout layout_;
  const absl::Duration timeout_;
  SerialQueue queue_;  // last: joined before the groups it uses go
};

}  // namespace tessera::collectives
