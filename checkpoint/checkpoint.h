// Checkpoints that survive a crash while they are written; the training
// examples resume from them (--checkpoint_dir, --checkpoint_every:
// examples/common/training.h). Optimizer state goes in as bytes
// (checkpoint/optimizer_state.h).
//
//   Checkpoint checkpoint;
//   checkpoint.tensors["model.fc.weight"] = fc->weight;   // parameters, buffers,
//   checkpoint.tensors["adam.step.0"] = ...;              // optimizer state
//   checkpoint.position = {epoch, step, samples_seen, at::get_default_generator state};
//   SaveCheckpoint(dir, "ps", checkpoint);                 // rank 0 or the owner
//   std::optional<Checkpoint> last = LoadCheckpoint(dir, "ps");  // every worker
//
// Note [Atomic checkpoints]: a checkpoint is written to a temporary file in
// the same directory, flushed to disk (fsync), renamed over the previous
// one, and the directory is flushed: rename is atomic on POSIX file
// systems, so a crash (a SIGKILL, a power cut after the fsyncs) at any
// point leaves either the previous checkpoint or the new one, whole —
// never a mix. Temporary files a crash leaves behind are ignored and
// replaced. Each file starts with a magic and its payload's length, so a
// truncated or foreign file is refused (DataLoss) instead of half-read.
//
// Note [Checkpoint format]: a file is the magic `TSRCKPT2`, the length of
// its header (u64, host order), the header — a pickled dictionary of the
// training position and each tensor's name, scalar type and shape, in name
// order — and then each tensor's bytes, contiguous, in the same order. The
// bytes are written from the tensors' own memory and read into the tensors
// the loader allocates: version 1 (`TSRCKPT1`, still read) pickled them
// into one buffer first, a copy of every byte on each side and the larger
// part of the time a parameter server's shard took to save (see
// docs/benchmarks-history.md, "Checkpoint format 2"). A file whose header
// does not add up to its size, or that names another type, is refused
// (DataLoss); as in version 1 the tensors' bytes carry no checksum.
//
// Errors follow the README's rule: StatusError naming the path and cause.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tessera::checkpoint {

// Where training stands: enough to resume at the next step.
struct TrainingPosition {
  int64_t epoch = 0;         // the epoch in progress
  int64_t step = 0;          // steps done in it
  int64_t samples_seen = 0;  // the sampler's position in the epoch
  at::Tensor rng_state;      // e.g. at::detail::getDefaultCPUGenerator().get_state()
};

struct Checkpoint {
  std::map<std::string, at::Tensor> tensors;
  TrainingPosition position;
};

// Writes `checkpoint` as `dir`/`name`.ckpt, atomically (see Note [Atomic
// checkpoints]). Creates `dir` if needed.
void SaveCheckpoint(const std::string& dir, const std::string& name,
                    const Checkpoint& checkpoint);

// The last checkpoint saved as `name` in `dir`; nullopt if there is none.
std::optional<Checkpoint> LoadCheckpoint(const std::string& dir, const std::string& name);

}  // namespace tessera::checkpoint
