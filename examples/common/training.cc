#include "examples/common/training.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/status.h"
#include "examples/common/example_main.h"

ABSL_FLAG(int, epochs, 2, "passes over this worker's shard of the training set");
ABSL_FLAG(int64_t, batch, 64, "examples per step (per trainer)");
ABSL_FLAG(double, lr, 1e-3, "learning rate");
ABSL_FLAG(int64_t, max_steps, 0, "steps per epoch at most; 0: the whole shard");
ABSL_FLAG(int64_t, log_every, 100, "steps between progress lines");
ABSL_FLAG(uint64_t, seed, 0, "seed of the model's initial parameters");
ABSL_FLAG(int64_t, test_images, 0,
          "test images to measure the accuracy on (the test set's first N); 0: all 10,000");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "directory of the checkpoints to resume from and to save; empty: none");
ABSL_FLAG(int64_t, checkpoint_every, 200,
          "steps between checkpoints (with --checkpoint_dir); 0: none saved");

namespace tessera::examples {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t TestImages(const data::Examples& test, int64_t count) {
  const int64_t all = test.labels.size(0);
  return count > 0 ? std::min(count, all) : all;
}

double TestAccuracy(const data::Examples& test, int64_t count,
                    const std::function<at::Tensor(const at::Tensor&)>& forward) {
  constexpr int64_t kBatch = 500;
  at::NoGradGuard no_grad;
  count = TestImages(test, count);
  int64_t correct = 0;
  for (int64_t start = 0; start < count; start += kBatch) {
    const int64_t size = std::min(kBatch, count - start);
    correct += forward(test.images.narrow(0, start, size))
                   .argmax(1)
                   .eq(test.labels.narrow(0, start, size))
                   .sum()
                   .item<int64_t>();
  }
  return count == 0 ? 0 : static_cast<double>(correct) / static_cast<double>(count);
}

void SetDefaultLearningRate(double lr) { absl::SetFlag(&FLAGS_lr, lr); }

void SetDefaultEpochsAndBatch(int epochs, int64_t batch) {
  absl::SetFlag(&FLAGS_epochs, epochs);
  absl::SetFlag(&FLAGS_batch, batch);
}

void SetDefaultTestImages(int64_t count) { absl::SetFlag(&FLAGS_test_images, count); }

void Require(bool holds, const std::string& requirement) {
  if (!holds) throw StatusError(absl::InvalidArgumentError(requirement));
}

int RunExample(int argc, char** argv, const std::string& usage,
               const std::function<int(const TrainingFlags&)>& run) {
  return ExampleMain(argc, argv, usage, [&](const std::string& program) {
    TrainingFlags flags;
    flags.epochs = absl::GetFlag(FLAGS_epochs);
    flags.batch = absl::GetFlag(FLAGS_batch);
    flags.lr = absl::GetFlag(FLAGS_lr);
    flags.max_steps = absl::GetFlag(FLAGS_max_steps);
    flags.log_every = absl::GetFlag(FLAGS_log_every);
    flags.seed = absl::GetFlag(FLAGS_seed);
    flags.test_images = absl::GetFlag(FLAGS_test_images);
    flags.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
    flags.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
    if (flags.epochs < 1 || flags.batch < 1 || flags.log_every < 1 || flags.lr <= 0 ||
        flags.max_steps < 0 || flags.checkpoint_every < 0 || flags.test_images < 0) {
      std::fprintf(stderr,
                   "%s: --epochs, --batch, --log_every must be >= 1, --lr > 0 and "
                   "--max_steps, --checkpoint_every, --test_images >= 0\n",
                   program.c_str());
      return 2;
    }
    at::set_num_threads(1);
    return run(flags);
  });
}

double TrainEpochs(const TrainingFlags& flags, const data::Examples& data,
                   ddp::DistributedSampler& sampler, const std::string& who,
                   const std::function<double(const at::Tensor&, const at::Tensor&)>& step,
                   const EpochHooks& hooks) {
  const int64_t per_epoch =
      (static_cast<int64_t>(sampler.num_samples()) + flags.batch - 1) / flags.batch;
  const int64_t steps = flags.max_steps > 0 ? std::min(flags.max_steps, per_epoch) : per_epoch;
  int64_t trained = 0;
  double seconds = 0;
  for (int epoch = static_cast<int>(hooks.start_epoch) + 1; epoch <= flags.epochs; ++epoch) {
    sampler.set_epoch(static_cast<uint64_t>(epoch - 1));
    int64_t first = 1;
    // Resuming mid-epoch: the batches before the checkpoint were trained.
    if (epoch == hooks.start_epoch + 1) {
      for (; first <= hooks.start_step; ++first) sampler.next(static_cast<size_t>(flags.batch));
    }
    const auto epoch_start = Clock::now();
    double window_loss = 0;
    int64_t window_steps = 0, window_samples = 0;
    auto window_start = Clock::now();
    for (int64_t s = first; s <= steps; ++s) {
      auto indices = sampler.next(static_cast<size_t>(flags.batch));
      if (!indices) break;
      at::Tensor index = at::tensor(std::vector<int64_t>(indices->begin(), indices->end()));
      window_loss += step(data.images.index_select(0, index), data.labels.index_select(0, index));
      ++window_steps;
      window_samples += index.size(0);
      if (s % flags.log_every == 0 || s == steps) {
        std::printf("[%s] epoch %d step %lld/%lld: loss %.4f, %.0f samples/s\n", who.c_str(),
                    epoch, static_cast<long long>(s), static_cast<long long>(steps),
                    window_loss / window_steps, window_samples / SecondsSince(window_start));
        std::fflush(stdout);
        trained += window_samples;
        window_loss = 0;
        window_steps = window_samples = 0;
        window_start = Clock::now();
      }
      if (hooks.after_step) hooks.after_step(epoch - 1, s, (epoch - 1) * steps + s);
    }
    seconds += SecondsSince(epoch_start);
  }
  return trained / seconds;
}

}  // namespace tessera::examples
