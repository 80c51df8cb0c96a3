// PsOptions: what servers and trainers of a sharded parameter server agree
// on — the job's name in the store, its servers and trainers, its tables.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ps/table_options.h"

namespace tessera::ps {

struct PsOptions {
  // The store keys of this parameter server: tessera/ps/<job>/...
  std::string job = "ps";
  // The workers that hold shards, in order: shard i of every table on
  // servers[i] (Note [Shard map], ps/shard_map.h).
  std::vector<std::string> servers;
  // The workers whose clocks count from the start; empty: every worker of
  // the job that is not a server. Trainers that join later say so (Hello).
  std::vector<std::string> trainers;
  std::vector<TableOptions> tables;
  // How long a trainer waits for the servers' shard map.
  absl::Duration start_timeout = absl::Seconds(120);
};

}  // namespace tessera::ps
