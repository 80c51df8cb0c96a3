// Where a recommender trainer's tables live: on the parameter servers
// (ps::PsClient), or in this process (the same rows and optimizers,
// ps::RowStore, with no servers: the one-process baseline the distributed
// job is measured against, computing exactly the same steps).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "common/future.h"
#include "ps/ps_client.h"
#include "ps/table_options.h"

namespace tessera::examples {

class ModelTables {
 public:
  virtual ~ModelTables() = default;
  // Each table's rows of its `keys` (distinct), as ps::PsClient::Pull: a
  // step's pulls in one call.
  virtual Future<std::vector<at::Tensor>> Pull(const std::vector<ps::TableKeys>& parts) = 0;
  // Gradients for each table's rows of its `keys` (distinct), as
  // ps::PsClient::Push.
  virtual Future<std::monostate> Push(const std::vector<ps::TableKeys>& parts) = 0;
  // Ends this trainer's step (ps::PsClient::Clock).
  virtual Future<std::monostate> Clock() = 0;
  // A checkpoint of every table at one clock (ps::PsClient::Checkpoint):
  // its clock once written. FailedPrecondition in one process.
  virtual Future<int64_t> Checkpoint() = 0;
  // The clock this trainer starts at: 0, or in a job started anew from a
  // checkpoint, the checkpoint's (its steps before it are done).
  virtual int64_t StartClock() const = 0;
};

// `clocked`: a table of the client's, whose clock is every table's.
std::unique_ptr<ModelTables> RemoteTables(std::unique_ptr<ps::PsClient> client,
                                          std::string clocked);
std::unique_ptr<ModelTables> LocalTables(const std::vector<ps::TableOptions>& tables);

}  // namespace tessera::examples
