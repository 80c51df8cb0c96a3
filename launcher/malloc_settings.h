// The glibc malloc settings tessera-run gives its workers; see Note
// [Worker malloc settings].
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera::launcher {

// Note [Worker malloc settings]
// glibc's malloc serves a request above its mmap threshold (128 KiB at
// first, rising with freed blocks to at most 32 MiB) with a fresh mmap,
// unmapped again at free, and hands the heap's free top back to the kernel
// once it exceeds the trim threshold. A training step allocates and frees
// the same large tensors every step (activations, gradients, received
// parameters), so with those defaults every step maps its memory afresh
// and page-faults it in again: the parameter-server example's job took
// 1.7x as long (docs/benchmarks.md, "malloc"). tessera-run therefore gives
// its workers a fixed mmap threshold and trim threshold of 256 MiB, as
// torchrun gives its workers OMP_NUM_THREADS: blocks up to 256 MiB are
// reused from the heap, and a process keeps up to 256 MiB freed at its
// heap's top rather than returning it (a process that never grows that
// large keeps nothing more). A malloc setting already in the environment
// (either variable, or GLIBC_TUNABLES naming glibc.malloc) means the user
// chose: the workers then get none of ours. tessera-run --tune_malloc=false
// gives none either.
inline constexpr char kMmapThresholdVariable[] = "MALLOC_MMAP_THRESHOLD_";
inline constexpr char kTrimThresholdVariable[] = "MALLOC_TRIM_THRESHOLD_";

// The variables to set in a worker's environment on top of the launcher's
// own: both thresholds, or nothing when that environment sets malloc up.
std::vector<std::pair<std::string, std::string>> WorkerMallocSettings();

}  // namespace tessera::launcher
