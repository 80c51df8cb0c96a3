// Slurm's conventions for the env:// rendezvous: where a job started by
// srun (one process per task) or sbatch finds its ranks and its master.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::store {

// The first host of a Slurm host list, as Slurm compresses them:
// "node[01-04,07],gpu5" -> "node01"; "rack[2-3]-n[5-6]" -> "rack2-n5".
absl::StatusOr<std::string> FirstHostOfNodeList(const std::string& list);

// The first host of SLURM_JOB_NODELIST (or SLURM_NODELIST): the master when
// MASTER_ADDR is not set, as in torch's Slurm recipes. nullopt outside
// Slurm; an error for a list that cannot be read.
absl::StatusOr<std::optional<std::string>> SlurmMasterHost();

// An integer Slurm variable, nullopt when unset (or not an integer).
std::optional<int> SlurmInt(const char* name);

}  // namespace tessera::store
