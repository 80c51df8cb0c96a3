#include "pipeline/schedule.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <torch/csrc/autograd/autograd.h>

#include <deque>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/mutex.h"
#include "common/status.h"
#include "rref/remote.h"

namespace tessera::pipeline {

std::string ScheduleName(Schedule schedule) {
  return schedule == Schedule::kGPipe ? "gpipe" : "1f1b";
}

namespace {

// A forward output or a finished backward, reported by a call's callback.
struct Event {
  bool backward = false;
  int64_t micro = 0;
  absl::StatusOr<at::Tensor> value;
};

// Callbacks run on transport or pool threads; the step's loop, which must
// launch every call itself (it holds the autograd context), waits here.
// Shared with the callbacks, which may outlive a step that failed.
class EventQueue {
 public:
  void Push(Event event) {
    MutexLock lock(&mu_);
    events_.push_back(std::make_unique<Event>(std::move(event)));
    changed_.SignalAll();
  }
  // The next event; nullptr at the deadline. Events travel by pointer: a
  // StatusOr<Tensor> moved into an optional made gcc -O2 warn (a false
  // -Wmaybe-uninitialized) where nothing needs moving at all.
  std::unique_ptr<Event> Pop(absl::Time deadline) {
    MutexLock lock(&mu_);
    if (!changed_.WaitUntil(
            &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !events_.empty(); }, deadline)) {
      return nullptr;
    }
    std::unique_ptr<Event> event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  Mutex mu_;
  CondVar changed_;
  std::deque<std::unique_ptr<Event>> events_ ABSL_GUARDED_BY(mu_);
};

class ScheduledStep {
 public:
  ScheduledStep(rref::RRefContext& rrefs, const std::vector<rref::RRef<Stage>>& stages,
                absl::Duration timeout)
      : rrefs_(rrefs), stages_(stages), call_{timeout} {}

  // Micro-batch `micro` through every stage; its output comes back as an event.
  void LaunchForward(int64_t micro, const at::Tensor& input) {
    rref::RRef<at::Tensor> value = rref::MakeRRef(rrefs_, input);
    for (size_t k = 0; k + 1 < stages_.size(); ++k) {
      value = stages_[k].Remote<at::Tensor>("train_forward", value, micro, k > 0);
    }
    Report(stages_.back().RpcAsync<at::Tensor>(call_, "train_forward", value, micro,
                                               stages_.size() > 1),
           /*backward=*/false, micro);
  }

  // Micro-batch `micro`'s backward from the last stage to the first, fed
  // with the gradient of its output; stage 0's completion is the event.
  void LaunchBackward(int64_t micro, const at::Tensor& output_gradient) {
    rref::RRef<at::Tensor> grad = rref::MakeRRef(rrefs_, output_gradient);
    for (size_t k = stages_.size() - 1; k > 0; --k) {
      grad = stages_[k].Remote<at::Tensor>("train_backward", grad, micro, true);
    }
    Report(stages_.front().RpcAsync<at::Tensor>(call_, "train_backward", grad, micro, false),
           /*backward=*/true, micro);
  }

  std::unique_ptr<Event> Next(absl::Time deadline) { return events_->Pop(deadline); }

 private:
  void Report(const Future<at::Tensor>& call, bool backward, int64_t micro) {
    call.OnReady([events = events_, backward, micro](const absl::StatusOr<at::Tensor>& value) {
      events->Push(Event{backward, micro, value});
    });
  }

  rref::RRefContext& rrefs_;
  const std::vector<rref::RRef<Stage>>& stages_;
  const rpc::CallOptions call_;
  const std::shared_ptr<EventQueue> events_ = std::make_shared<EventQueue>();
};

// The loss of micro-batch `micro`'s `output` against `target`, weighted by
// its share of the batch, and the gradient that weighted loss sends into
// `output`. The user's loss runs here, on the driver: what it throws (a
// target of the wrong shape, say) becomes an InvalidArgument StatusError
// naming the micro-batch, like a stage's failure.
std::pair<double, at::Tensor> WeightedLoss(const MicroBatchLoss& loss, const at::Tensor& output,
                                           const at::Tensor& target, double weight, int64_t micro,
                                           int64_t count) {
  try {
    at::Tensor leaf = output.detach().requires_grad_(true);
    at::Tensor value = loss(leaf, target) * weight;
    at::Tensor grad = torch::autograd::grad({value}, {leaf})[0];
    return {value.item<double>(), grad};
  } catch (const StatusError&) {
    throw;
  } catch (const std::exception& e) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "pipeline loss of micro-batch ", micro, " of ", count, " failed: ", e.what())));
  }
}

}  // namespace

StepResult RunScheduledStep(rref::RRefContext& rrefs, const std::vector<rref::RRef<Stage>>& stages,
                            Schedule schedule, int64_t micro_batches, absl::Duration timeout,
                            const at::Tensor& batch, const at::Tensor& target,
                            const MicroBatchLoss& loss) {
  if (batch.size(0) != target.size(0)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "pipeline step: batch has ", batch.size(0), " rows but target ", target.size(0))));
  }
  const std::vector<at::Tensor> inputs = batch.chunk(micro_batches);
  const std::vector<at::Tensor> targets = target.chunk(micro_batches);
  const auto count = static_cast<int64_t>(inputs.size());
  const int64_t in_flight_limit =
      schedule == Schedule::kOneFOneB ? static_cast<int64_t>(stages.size()) : count;
  const absl::Time deadline = WaitDeadline(absl::Now() + rrefs.EffectiveTimeout(timeout));

  ScheduledStep step(rrefs, stages, timeout);
  std::vector<at::Tensor> outputs(count), output_grads(count);
  StepResult result;
  int64_t launched = 0, in_flight = 0, forwards_done = 0, backwards_done = 0;
  while (backwards_done < count) {
    while (launched < count && in_flight < in_flight_limit) {
      step.LaunchForward(launched, inputs[launched]);
      ++launched;
      ++in_flight;
    }
    std::unique_ptr<Event> event = step.Next(deadline);
    if (event == nullptr) {
      throw StatusError(absl::DeadlineExceededError(absl::StrCat(
          "pipeline step (", ScheduleName(schedule), "): ", forwards_done, " of ", count,
          " forwards and ", backwards_done, " backwards done at the deadline")));
    }
    const int64_t i = event->micro;
    if (!event->value.ok()) {
      throw StatusError(Annotate(
          event->value.status(),
          absl::StrCat("pipeline ", event->backward ? "backward" : "forward", " of micro-batch ", i,
                       " of ", count, " (", ScheduleName(schedule), ")")));
    }
    if (event->backward) {
      ++backwards_done;
      --in_flight;
      continue;
    }
    ++forwards_done;
    outputs[i] = *std::move(event->value);
    const double weight = static_cast<double>(inputs[i].size(0)) / batch.size(0);
    auto [value, grad] = WeightedLoss(loss, outputs[i], targets[i], weight, i, count);
    result.loss += value;
    if (schedule == Schedule::kOneFOneB) {
      step.LaunchBackward(i, grad);
      continue;
    }
    output_grads[i] = std::move(grad);
    if (forwards_done == count) {
      for (int64_t j = count - 1; j >= 0; --j) step.LaunchBackward(j, output_grads[j]);
    }
  }
  result.output = at::cat(outputs);
  return result;
}

}  // namespace tessera::pipeline
