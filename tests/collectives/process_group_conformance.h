// The ProcessGroup conformance suite: every backend's test runs it on every
// rank of a real multi-process group, and each rank checks its own results.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/env_rendezvous.h"
#include "collectives/process_group.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {

// Every op, several dtypes, sizes from 4 bytes to 64 MB; point to point
// when there is more than one rank.
absl::Status RunConformance(collectives::ProcessGroup& pg);

// Waits for `work` (bounded).
absl::Status Done(collectives::Work work);

// A child rank: runs `body` on the group made from the environment
// (reporting a failure to make it) and returns the exit code.
int RunChildRank(absl::StatusOr<collectives::EnvProcessGroup> env,
                 const std::function<absl::Status(collectives::ProcessGroup&)>& body);

// The test's side of a group: hosts the store; ranks 1..n-1 are children.
class ProcessGroupWorld {
 public:
  ProcessGroupWorld();
  // Starts ranks 1..world_size-1 running `scenario`, with `extra_env` set.
  void StartChildren(int world_size, const std::string& scenario,
                     const std::map<std::string, std::string>& extra_env = {});
  store::StoreClient* store() { return store_.get(); }
  std::vector<std::unique_ptr<WorkerProcess>>& children() { return children_; }

 private:
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::StoreClient> store_;
  std::vector<std::unique_ptr<WorkerProcess>> children_;
};

}  // namespace tessera::testing
