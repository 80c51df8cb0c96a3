// Resuming the training examples from checkpoints (--checkpoint_dir,
// --checkpoint_every; see Note [Atomic checkpoints], checkpoint/checkpoint.h).
//
// The process that owns the training state — rank 0 of a DDP group (every
// rank holds the same), the parameter server — saves the model, the
// optimizer state and the position (epoch, step, RNG state) every
// --checkpoint_every steps. When a worker dies and tessera-run
// --max_restarts restarts the group, every rank reads the last checkpoint
// and carries on at the step after it, instead of from the beginning.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "examples/common/training.h"

namespace tessera::examples {

class Resume {
 public:
  // `name`: the checkpoint's file name in --checkpoint_dir; `writer`:
  // whether this process saves it. Reads the last checkpoint, if any
  // (StatusError if it is damaged).
  Resume(const TrainingFlags& flags, std::string name, bool writer);

  bool enabled() const { return !dir_.empty(); }
  // The last checkpoint, or nullopt for a fresh start.
  const std::optional<checkpoint::Checkpoint>& last() const { return last_; }
  // Where training resumes: the epoch in progress and the steps done in it
  // ({0, 0} for a fresh start). Restores the RNG state too. Prints
  // "[who] resuming from <path> at epoch E step S" when it resumes.
  checkpoint::TrainingPosition Start(const std::string& who);
  // Whether a checkpoint is due after `steps` steps in all (this run's
  // count since the beginning of training, not of this process).
  bool Due(int64_t steps) const;
  // Saves `tensors` at `position` (with the RNG state), if this is the
  // writer; prints "[who] checkpoint at epoch E step S" if `announce`.
  void Save(const std::string& who, std::map<std::string, at::Tensor> tensors,
            checkpoint::TrainingPosition position, bool announce = true) const;

 private:
  const std::string dir_;
  const int64_t every_;
  const std::string name_;
  const bool writer_;
  std::optional<checkpoint::Checkpoint> last_;
};

}  // namespace tessera::examples
