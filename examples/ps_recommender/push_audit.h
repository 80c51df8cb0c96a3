// An audit of the recommender's pushes (--audit): beside the model, a
// counting table — each step adds 1 to the row of every embedding id it
// pulled, in the same call as the model's gradients — so that after
// training the servers' counts must add up to the pushes the trainers
// made. A push lost, or applied twice (say, sent again to a shard's new
// primary after a failover), shows as a difference.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "examples/ps_recommender/model_tables.h"
#include "ps/ps_client.h"
#include "ps/table_options.h"

namespace tessera::examples {

class PushAudit {
 public:
  // The counting table: a row per id of every field (field f's id i is
  // key f·vocabulary + i), each push adding its gradient of 1 as it comes.
  static ps::TableOptions Table();

  PushAudit(int64_t fields, int64_t vocabulary) : fields_(fields), vocabulary_(vocabulary) {}
  // A step's part of the push: 1 for each of field f's distinct ids
  // `unique[f]`; counted here too.
  ps::TableKeys Count(const std::vector<at::Tensor>& unique);
  // "[who] audit: pushed N touches (key sum S)": what this trainer pushed.
  void PrintPushed(const std::string& who) const;
  // "[who] audit: the servers counted N touches (key sum S)": the counting
  // table's rows, pulled through `tables` — once every trainer ended its
  // last step, the sum of what each trainer printed it pushed.
  void PrintCounted(const std::string& who, ModelTables& tables) const;

 private:
  const int64_t fields_, vocabulary_;
  int64_t touches_ = 0;  // rows pushed to, all steps together
  int64_t key_sum_ = 0;  // the sum of their keys: a push to other rows shows too
};

}  // namespace tessera::examples
