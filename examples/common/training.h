// What the Fashion-MNIST training examples share: their flags and the epoch
// loop with its progress lines.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"

namespace tessera::examples {

struct TrainingFlags {
  int epochs = 2;
  int64_t batch = 64;
  double lr = 1e-3;
  int64_t max_steps = 0;  // per epoch; 0 = the whole shard
  int64_t log_every = 100;
  uint64_t seed = 0;
  // An example's own flags: name (without "--") -> value, defaults preset.
  std::map<std::string, std::string> extra;

  int64_t ExtraInt(const std::string& name) const;
};

// Wall-clock seconds since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// Parses --epochs, --batch, --lr, --max_steps, --log_every, --seed and the
// flags named in `defaults.extra`, over `defaults`. Throws StatusError
// naming an unknown flag or a value out of range.
TrainingFlags ParseTrainingFlags(int argc, char** argv, TrainingFlags defaults);

// Trains `flags.epochs` epochs over this rank's `sampler` shard of `data`:
// `step(images, labels)` runs one step and returns its loss. Prints
// "[who] epoch E step S/N: loss L, X samples/s" every log_every steps and at
// the end of each epoch. Returns the training throughput in samples/s.
double TrainEpochs(const TrainingFlags& flags, const data::Examples& data,
                   ddp::DistributedSampler& sampler, const std::string& who,
                   const std::function<double(const at::Tensor&, const at::Tensor&)>& step);

}  // namespace tessera::examples
