#include "examples/common/resume.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cstdio>
#include <mutex>

namespace tessera::examples {
namespace {

at::Generator& DefaultGenerator() {
  static at::Generator generator = at::detail::getDefaultCPUGenerator();
  return generator;
}

}  // namespace

Resume::Resume(const TrainingFlags& flags, std::string name, bool writer)
    : dir_(flags.checkpoint_dir),
      every_(flags.checkpoint_every),
      name_(std::move(name)),
      writer_(writer) {
  if (enabled()) last_ = checkpoint::LoadCheckpoint(dir_, name_);
}

checkpoint::TrainingPosition Resume::Start(const std::string& who) {
  if (!last_.has_value()) return {};
  const checkpoint::TrainingPosition& position = last_->position;
  if (position.rng_state.defined()) {
    std::lock_guard<std::mutex> lock(DefaultGenerator().mutex());
    DefaultGenerator().set_state(position.rng_state);
  }
  std::printf("[%s] resuming from %s/%s.ckpt at epoch %lld step %lld\n", who.c_str(), dir_.c_str(),
              name_.c_str(), static_cast<long long>(position.epoch + 1),
              static_cast<long long>(position.step));
  std::fflush(stdout);
  return position;
}

bool Resume::Due(int64_t steps) const {
  return enabled() && writer_ && every_ > 0 && steps > 0 && steps % every_ == 0;
}

void Resume::Save(const std::string& who, std::map<std::string, at::Tensor> tensors,
                  checkpoint::TrainingPosition position, bool announce) const {
  if (!enabled() || !writer_) return;
  {
    std::lock_guard<std::mutex> lock(DefaultGenerator().mutex());
    position.rng_state = DefaultGenerator().get_state();
  }
  checkpoint::SaveCheckpoint(dir_, name_, checkpoint::Checkpoint{std::move(tensors), position});
  if (!announce) return;
  std::printf("[%s] checkpoint at epoch %lld step %lld\n", who.c_str(),
              static_cast<long long>(position.epoch + 1), static_cast<long long>(position.step));
  std::fflush(stdout);
}

}  // namespace tessera::examples
