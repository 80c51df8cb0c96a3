// The files of a parameter server's checkpoints (see Note [Sharded
// checkpoints], ps/shard_cut.cc): under PsOptions::checkpoint_dir,
//   clock-<c>/<table>.<i>-of-<n>.ckpt
// one per table and shard, written by the shard's primary, atomically
// (see Note [Atomic checkpoints], checkpoint/checkpoint.h): the shard's rows at
// the cut (their keys for a sparse table) and their optimizer state. The
// checkpoint at clock c is complete once every table has a file for every
// shard of one layout; servers write theirs in parallel.
//
// Restoring onto another number of servers (resharding): each new shard
// reads the rows that fall to it from every file of the old layout (for
// a sparse table, whose keys are hashed, that is all of them; for a dense
// one, those whose range meets its own). The directory must be readable
// by every server: one host, or a file system they share.
//
// Note [Progress records]: a checkpoint says where a job starting anew
// resumes, not where the job it replaces had got to. So every primary also
// records its shard's clock, at most five times a second while it moves, in
//   progress/shard-<i>-of-<n>
// (atomically: written aside, then renamed), and a job started anew says
// how far its checkpoint rolled each shard back (RollbackSince). A record
// may trail the shard's true end by 200 ms and a clock, so the figure is a
// lower bound. Only the newest layout's records count (by their
// files' times): a job restored onto another number of servers leaves the
// old layout's behind.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/shard.h"
#include "ps/shard_snapshot.h"
#include "ps/table_options.h"

namespace tessera::ps {

// Writes `rows` (Shard::Snapshot's, at the cut) as `table`'s shard `shard`
// of `shards` at `clock`.
absl::Status WriteShardCheckpoint(const std::string& dir, const TableOptions& table, int64_t shard,
                                  int64_t shards, int64_t clock, const ShardSnapshot& rows);

// A complete checkpoint: its clock and each table's number of shards.
struct CheckpointLayout {
  int64_t clock = 0;
  std::map<std::string, int64_t> shards;
};

// The latest complete checkpoint under `dir` of every one of `tables`;
// nullopt if there is none (or no `dir`).
std::optional<CheckpointLayout> LatestCheckpoint(const std::string& dir,
                                                 const std::vector<TableOptions>& tables);

// Puts into `shard` — new, no change made — the rows of `layout`'s
// checkpoint that belong to it, and starts it at `clock` (Shard::ResumeAt:
// the checkpoint's, or later where its trainers went on without it).
// Answers the rows restored; DataLoss naming the file for one missing,
// unreadable or not of this table.
absl::StatusOr<int64_t> RestoreShardCheckpoint(const std::string& dir,
                                               const CheckpointLayout& layout, Shard& shard,
                                               int64_t index, int64_t shards, int64_t clock);

// Records that `shard` of `shards` reached `clock` (see Note [Progress records]).
absl::Status RecordProgress(const std::string& dir, int64_t shard, int64_t shards, int64_t clock);

// How far a job started anew from the checkpoint at `checkpoint_clock`
// rolled back: the clock each shard of the job before it had reached by
// its last record (shard -> clock; the newest layout's), and their number.
struct Rollback {
  int64_t checkpoint_clock = 0;
  int64_t shards = 0;                 // of the layout recorded; 0: no record
  std::map<int64_t, int64_t> reached;  // shard -> its last recorded clock
  // The most clocks a shard lost (0 if none was recorded past the checkpoint).
  int64_t Clocks() const;
  // "shard 0 of 2 reached clock 9, shard 1 of 2 clock 8: rolled back up to
  // 4 clocks", or that nothing was recorded.
  std::string ToString() const;
};
Rollback RollbackSince(const std::string& dir, int64_t checkpoint_clock);

}  // namespace tessera::ps
