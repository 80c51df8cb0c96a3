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
  // servers[i] (see Note [Shard map], ps/shard_map.h).
  std::vector<std::string> servers;
  // The workers whose clocks count from the start; empty: every worker of
  // the job that is not a server. Trainers that join later say so (Hello).
  std::vector<std::string> trainers;
  std::vector<TableOptions> tables;
  // How long a trainer waits for the servers' shard map.
  absl::Duration start_timeout = absl::Seconds(120);
  // Backups of every shard (see Note [Parameter-server replication],
  // ps/ps_server.h): each change is applied on them before it is
  // acknowledged, and one takes over when its primary fails. At most the
  // servers but one; on other hosts than the primary's where there are.
  int backups = 1;
  // A replica silent this long is taken for failed: a backup whose primary
  // said nothing for this long takes its place; a primary whose backup
  // answered nothing for this long goes on without it. A primary heartbeats
  // its backups every twentieth of it and answers pulls only while each
  // answered within a fifth (its lease). A process that dies is noticed at
  // once (its connections reset), and its shards move after the lease.
  absl::Duration failure_timeout = absl::Seconds(3);
  // Where the servers write checkpoints (PsClient::Checkpoint; see Note
  // [Sharded checkpoints], ps/shard_cut.cc; the files: ps/checkpoint_files.h),
  // and whence a job's servers, started anew, resume: from the latest
  // complete checkpoint there, onto any number of servers. Empty: none.
  std::string checkpoint_dir;
};

}  // namespace tessera::ps
