// What the Fashion-MNIST training examples share: their flags and the epoch
// loop with its progress lines.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"

namespace tessera::examples {

// The training flags every Fashion-MNIST example takes (ABSL_FLAGs
// --epochs, --batch, --lr, --max_steps, --log_every, --seed, --test_images, defined in
// training.cc), as read after parsing.
struct TrainingFlags {
  int epochs = 2;
  int64_t batch = 64;
  double lr = 1e-3;
  int64_t max_steps = 0;  // per epoch; 0 = the whole shard
  int64_t log_every = 100;
  uint64_t seed = 0;
  int64_t test_images = 0;  // the accuracy's: the test set's first N; 0 = all
  // Checkpoints (examples/common/resume.h): where, and every how many
  // steps; an empty directory turns them off.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
};

// An example's own default learning rate, epochs and batch (before the
// command line is read).
void SetDefaultLearningRate(double lr);
void SetDefaultEpochsAndBatch(int epochs, int64_t batch);
void SetDefaultTestImages(int64_t count);

// ExampleMain (example_main.h) for the training examples: reads the
// training flags (and the example's own ABSL_FLAGs), gives this process one
// compute thread (the machine's cores go to the processes) and returns
// run(flags). Bad flag values exit 2.
int RunExample(int argc, char** argv, const std::string& usage,
               const std::function<int(const TrainingFlags&)>& run);

// Throws StatusError (InvalidArgument) with `requirement` unless `holds`.
void Require(bool holds, const std::string& requirement);

// Wall-clock seconds since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// Where TrainEpochs starts, and what it does after each step: resuming
// from a checkpoint and saving them (examples/common/resume.h).
struct EpochHooks {
  int64_t start_epoch = 0;  // 0-based
  int64_t start_step = 0;   // steps of start_epoch already done
  // After each step: the epoch (0-based), the steps done in it, and the
  // steps done in all since the beginning of training.
  std::function<void(int64_t epoch, int64_t step, int64_t steps_done)> after_step;
};

// Trains `flags.epochs` epochs over this rank's `sampler` shard of `data`:
// `step(images, labels)` runs one step and returns its loss. Prints
// "[who] epoch E step S/N: loss L, X samples/s" every log_every steps and at
// the end of each epoch. Returns the training throughput in samples/s.
double TrainEpochs(const TrainingFlags& flags, const data::Examples& data,
                   ddp::DistributedSampler& sampler, const std::string& who,
                   const std::function<double(const at::Tensor&, const at::Tensor&)>& step,
                   const EpochHooks& hooks = {});

// The fraction of the first `count` images of `test` (all when 0) that
// `forward` (a model's forward pass, run under no gradient) classifies
// right, taken 500 at a time: the whole test set through a CNN at once held
// about 1 GB per layer, and three replicas evaluating so took 35 s, longer
// than their 60 training steps.
double TestAccuracy(const data::Examples& test, int64_t count,
                    const std::function<at::Tensor(const at::Tensor&)>& forward);
// How many images TestAccuracy(test, count, ...) measures, for its line.
int64_t TestImages(const data::Examples& test, int64_t count);

}  // namespace tessera::examples
