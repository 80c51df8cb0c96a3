#include "examples/common/training.h"

#include <ATen/ops/tensor.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "common/status.h"

namespace tessera::examples {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t TrainingFlags::ExtraInt(const std::string& name) const {
  int64_t value = 0;
  auto it = extra.find(name);
  if (it == extra.end() || !absl::SimpleAtoi(it->second, &value)) {
    throw StatusError(absl::InvalidArgumentError("--" + name + " must be an integer"));
  }
  return value;
}

TrainingFlags ParseTrainingFlags(int argc, char** argv, TrainingFlags flags) {
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) throw StatusError(absl::InvalidArgumentError(name + " needs a value"));
    const std::string value = argv[i + 1];
    if (name == "--epochs") flags.epochs = std::atoi(value.c_str());
    else if (name == "--batch") flags.batch = std::atoll(value.c_str());
    else if (name == "--lr") flags.lr = std::atof(value.c_str());
    else if (name == "--max_steps") flags.max_steps = std::atoll(value.c_str());
    else if (name == "--log_every") flags.log_every = std::atoll(value.c_str());
    else if (name == "--seed") flags.seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (name.rfind("--", 0) == 0 && flags.extra.count(name.substr(2)) > 0) {
      flags.extra[name.substr(2)] = value;
    } else {
      throw StatusError(absl::InvalidArgumentError("unknown flag " + name));
    }
  }
  if (flags.epochs < 1 || flags.batch < 1 || flags.log_every < 1 || flags.lr <= 0) {
    throw StatusError(absl::InvalidArgumentError(
        "--epochs, --batch, --log_every must be >= 1 and --lr > 0"));
  }
  return flags;
}

double TrainEpochs(const TrainingFlags& flags, const data::Examples& data,
                   ddp::DistributedSampler& sampler, const std::string& who,
                   const std::function<double(const at::Tensor&, const at::Tensor&)>& step) {
  const int64_t per_epoch =
      (static_cast<int64_t>(sampler.num_samples()) + flags.batch - 1) / flags.batch;
  const int64_t steps = flags.max_steps > 0 ? std::min(flags.max_steps, per_epoch) : per_epoch;
  int64_t trained = 0;
  double seconds = 0;
  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    sampler.set_epoch(static_cast<uint64_t>(epoch - 1));
    const auto epoch_start = Clock::now();
    double window_loss = 0;
    int64_t window_steps = 0, window_samples = 0;
    auto window_start = Clock::now();
    for (int64_t s = 1; s <= steps; ++s) {
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
    }
    seconds += SecondsSince(epoch_start);
  }
  return trained / seconds;
}

}  // namespace tessera::examples
