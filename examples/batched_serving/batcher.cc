#include "examples/batched_serving/batcher.h"

#include <ATen/ops/stack.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace tessera::examples {

Batcher::Batcher(Model model, int64_t max_batch, absl::Duration max_delay, int threads)
    : model_(std::move(model)), max_batch_(max_batch), max_delay_(max_delay) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

Batcher::~Batcher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  for (auto& thread : threads_) thread.join();
  MutexLock lock(&mu_);
  for (auto& request : waiting_) {
    request.answer.Set(absl::CancelledError("the batching server is shutting down"));
  }
}

Future<at::Tensor> Batcher::Submit(at::Tensor input, int caller) {
  Promise<at::Tensor> answer;
  MutexLock lock(&mu_);
  if (stopping_) return Future<at::Tensor>::Ready(absl::CancelledError("shutting down"));
  waiting_.push_back(Request{std::move(input), caller, answer, absl::Now()});
  changed_.SignalAll();
  return answer.GetFuture();
}

BatcherStats Batcher::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void Batcher::Loop() {
  while (true) {
    std::vector<Request> batch;
    {
      MutexLock lock(&mu_);
      changed_.Wait(
          &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !waiting_.empty(); });
      if (stopping_) return;
      // Full, or the oldest has waited long enough.
      changed_.WaitUntil(
          &mu_,
          [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return stopping_ || static_cast<int64_t>(waiting_.size()) >= max_batch_;
          },
          waiting_.front().arrived + max_delay_);
      if (stopping_) return;
      if (waiting_.empty()) continue;  // another thread took them
      const auto take = std::min<int64_t>(max_batch_, static_cast<int64_t>(waiting_.size()));
      for (int64_t i = 0; i < take; ++i) {
        batch.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
    }
    Run(std::move(batch));
  }
}

void Batcher::Run(std::vector<Request> batch) {
  std::vector<at::Tensor> inputs;
  std::set<int> callers;
  for (const auto& request : batch) {
    inputs.push_back(request.input);
    callers.insert(request.caller);
  }
  {
    MutexLock lock(&mu_);
    stats_.requests += static_cast<int64_t>(batch.size());
    stats_.batches += 1;
    stats_.mixed_batches += callers.size() > 1 ? 1 : 0;
    stats_.largest_batch = std::max<int64_t>(stats_.largest_batch, batch.size());
  }
  try {
    const at::Tensor outputs = model_(at::stack(inputs));
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].answer.Set(outputs[static_cast<int64_t>(i)].clone());
    }
  } catch (const std::exception& e) {
    for (auto& request : batch) {
      request.answer.Set(absl::InvalidArgumentError(absl::StrCat("model failed: ", e.what())));
    }
  }
}

}  // namespace tessera::examples
