#include "pipeline/plan_worker.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/autograd.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "common/trace.h"
#include "dist_autograd/dist_autograd.h"
#include "rref/remote.h"

namespace tessera::pipeline {

std::vector<int64_t> EncodeActions(const std::vector<Action>& actions) {
  std::vector<int64_t> encoded;
  for (const Action& a : actions) {
    encoded.insert(encoded.end(), {static_cast<int64_t>(a.kind), a.stage, a.micro_batch, a.peer});
  }
  return encoded;
}

namespace {

absl::StatusOr<std::vector<Action>> DecodeActions(const std::vector<int64_t>& encoded) {
  if (encoded.size() % 4 != 0) {
    return absl::InvalidArgumentError("a plan's actions come in fours (kind, stage, micro, peer)");
  }
  std::vector<Action> actions;
  for (size_t i = 0; i < encoded.size(); i += 4) {
    if (encoded[i] < 0 || encoded[i] > static_cast<int64_t>(ActionKind::kReceive)) {
      return absl::InvalidArgumentError(absl::StrCat("no action kind ", encoded[i]));
    }
    actions.push_back({static_cast<ActionKind>(encoded[i]), static_cast<int>(encoded[i + 1]),
                       static_cast<int>(encoded[i + 2]), static_cast<int>(encoded[i + 3])});
  }
  return actions;
}

// See Note [Tracing]: one span per action a stage computes.
trace::Span ActionSpan(const Action& a, int64_t step, int64_t context) {
  if (!trace::Enabled()) return {};
  trace::Span span = trace::Span::Begin(trace::Track::kPipeline, "pipeline", ToString(a));
  span.Arg("context", context);  // tessera-trace timeline draws one context's step
  span.Arg("step", step);
  span.Arg("micro_batch", a.micro_batch);
  span.Arg("stage", a.stage);
  return span;
}

}  // namespace

// One step's run of this worker's actions.
class PlanWorker::StepRun : public std::enable_shared_from_this<StepRun> {
 public:
  StepRun(std::shared_ptr<PlanWorker> worker, int64_t step, int64_t context,
          std::shared_ptr<dist_autograd::DistAutograd> autograd, std::vector<Action> actions,
          std::vector<at::Tensor> inputs, std::vector<at::Tensor> targets,
          std::vector<double> weights)
      : worker_(std::move(worker)),
        step_(step),
        context_(context),
        autograd_(std::move(autograd)),
        actions_(std::move(actions)),
        inputs_(std::move(inputs)),
        targets_(std::move(targets)),
        weights_(std::move(weights)),
        losses_(targets_.size(), 0.0) {}

  Future<std::vector<double>> done() const { return done_.GetFuture(); }

  // Runs actions until one waits for a receive (then again once it
  // arrived) or the list ends.
  void Advance() {
    while (next_ < actions_.size()) {
      const Action& a = actions_[next_];
      if (a.kind == ActionKind::kReceive) {
        Future<at::Tensor> letter =
            worker_->Incoming({step_, a.carries_activation(), a.stage, a.micro_batch});
        if (!letter.IsReady()) {
          letter.OnReady([self = shared_from_this()](const absl::StatusOr<at::Tensor>& got) {
            if (self->Received(got)) self->Advance();
          });
          return;
        }
        if (!Received(letter.Wait(absl::InfinitePast()))) return;
        continue;
      }
      if (a.kind == ActionKind::kSend) {
        absl::Status sent = Send(a);
        if (!sent.ok()) return Fail(sent);
      } else {
        trace::Span span = ActionSpan(a, step_, context_);
        absl::Status computed = Guarded([&] { return Compute(a); });
        if (!computed.ok()) return Fail(computed);
      }
      ++next_;
    }
    WhenAllOk(sends_).OnReady([self = shared_from_this()](const absl::StatusOr<bool>& sent) {
      if (!sent.ok()) {
        self->done_.Set(Annotate(sent.status(), absl::StrCat("step ", self->step_, "'s sends")));
        return;
      }
      self->done_.Set(self->losses_);
    });
  }

 private:
  // What one micro-batch holds at one stage between its F and its W.
  struct Kept {
    at::Tensor input;            // the stage's input, a leaf (requires grad past stage 0)
    at::Tensor output;           // its output, or at the last stage the weighted loss
    at::Tensor output_gradient;  // once B ran: what W differentiates with
  };
  using Where = std::pair<int64_t, int64_t>;  // stage, micro-batch

  template <typename Fn>
  static absl::Status Guarded(Fn&& fn) {
    try {
      return fn();
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(e.what());
    }
  }

  // Takes what the receive at next_ waited for, and moves past it.
  bool Received(const absl::StatusOr<at::Tensor>& got) {
    if (!got.ok()) {
      Fail(got.status());
      return false;
    }
    const Action& a = actions_[next_];
    (a.carries_activation() ? activations_ : gradients_)[{a.stage, a.micro_batch}] = *got;
    ++next_;
    return true;
  }

  void Fail(const absl::Status& why) {
    const Action& a = actions_[next_];
    done_.Set(
        Annotate(why, absl::StrCat("step ", step_, ": action ", next_, " (", ToString(a), ")")));
  }

  bool last(int64_t stage) const { return worker_->IsLastStage(stage); }

  absl::StatusOr<at::Tensor> Taken(std::map<Where, at::Tensor>& from, const Where& where,
                                   const char* what) {
    auto it = from.find(where);
    if (it == from.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no ", what, " for stage ", where.first, " micro-batch ", where.second));
    }
    at::Tensor value = std::move(it->second);
    from.erase(it);
    return value;
  }

  absl::Status Compute(const Action& a);
  absl::Status Forward(const Action& a, const StageModel& model);
  absl::Status Backward(const Action& a, const StageModel& model);
  absl::Status Send(const Action& a);

  const std::shared_ptr<PlanWorker> worker_;
  const int64_t step_, context_;
  const std::shared_ptr<dist_autograd::DistAutograd> autograd_;
  const std::vector<Action> actions_;
  const std::vector<at::Tensor> inputs_, targets_;
  const std::vector<double> weights_;
  std::vector<double> losses_;
  size_t next_ = 0;
  std::map<Where, Kept> kept_;
  // Inputs arrived or made here: activations for F, gradients for B/BW;
  // and the gradients of inputs B/BW made, for a send or the stage before.
  std::map<Where, at::Tensor> activations_, gradients_, input_gradients_;
  std::vector<Future<bool>> sends_;
  Promise<std::vector<double>> done_;
};

absl::Status PlanWorker::StepRun::Compute(const Action& a) {
  auto model = worker_->stages_.find(a.stage);
  if (model == worker_->stages_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("stage ", a.stage, " is not on this worker"));
  }
  if (a.kind == ActionKind::kForward) return Forward(a, model->second);
  return Backward(a, model->second);
}

absl::Status PlanWorker::StepRun::Forward(const Action& a, const StageModel& model) {
  const Where here{a.stage, a.micro_batch};
  at::Tensor x;
  if (a.stage == 0) {
    if (a.micro_batch >= static_cast<int>(inputs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no input for micro-batch ", a.micro_batch));
    }
    x = inputs_[a.micro_batch];
  } else if (auto local = kept_.find({a.stage - 1, a.micro_batch});
             local != kept_.end() && !activations_.count(here)) {
    x = local->second.output.detach().requires_grad_(true);
  } else {
    TESSERA_ASSIGN_OR_RETURN(x, Taken(activations_, here, "activation"));
    x = x.detach().requires_grad_(true);
  }
  at::Tensor y = model.forward(x);
  if (last(a.stage)) {
    if (a.micro_batch >= static_cast<int>(targets_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no target for micro-batch ", a.micro_batch));
    }
    y = worker_->loss_(y, targets_[a.micro_batch]) * weights_[a.micro_batch];
    losses_[a.micro_batch] = y.item<double>();
  }
  kept_[here] = {std::move(x), std::move(y), {}};
  return absl::OkStatus();
}

absl::Status PlanWorker::StepRun::Backward(const Action& a, const StageModel& model) {
  const Where here{a.stage, a.micro_batch};
  auto it = kept_.find(here);
  if (it == kept_.end()) {
    return absl::FailedPreconditionError("its forward did not run here (or its W ran already)");
  }
  Kept& kept = it->second;
  if (a.kind != ActionKind::kWeightBackward) {
    if (last(a.stage)) {
      kept.output_gradient = at::ones_like(kept.output);
    } else if (auto local = input_gradients_.find({a.stage + 1, a.micro_batch});
               local != input_gradients_.end() && !gradients_.count(here)) {
      kept.output_gradient = local->second;
      input_gradients_.erase(local);
    } else {
      TESSERA_ASSIGN_OR_RETURN(kept.output_gradient, Taken(gradients_, here, "gradient"));
    }
  }
  const bool input_gradient = a.stage > 0 && a.kind != ActionKind::kWeightBackward;
  const bool weights = a.kind != ActionKind::kInputBackward;
  std::vector<at::Tensor> wrt;
  if (weights) wrt = model.parameters;
  if (input_gradient) wrt.push_back(kept.input);
  if (!wrt.empty()) {
    // B keeps the graph for W; W and BW free it (the activations go).
    std::vector<at::Tensor> grads =
        torch::autograd::grad({kept.output}, wrt, {kept.output_gradient},
                              /*retain_graph=*/!weights, /*create_graph=*/false,
                              /*allow_unused=*/true);
    if (input_gradient) {
      input_gradients_[here] = grads.back().defined() ? grads.back() : at::zeros_like(kept.input);
      grads.pop_back();
    }
    if (weights) {
      TESSERA_RETURN_IF_ERROR(autograd_->AccumulateGradients(context_, model.parameters, grads));
    }
  }
  if (weights) kept_.erase(it);
  return absl::OkStatus();
}

absl::Status PlanWorker::StepRun::Send(const Action& a) {
  const Where here{a.stage, a.micro_batch};
  at::Tensor value;
  if (a.carries_activation()) {
    auto it = kept_.find(here);
    if (it == kept_.end()) return absl::FailedPreconditionError("nothing made to send");
    value = it->second.output.detach();
  } else {
    TESSERA_ASSIGN_OR_RETURN(value, Taken(input_gradients_, here, "input gradient"));
  }
  rref::RRef<PlanWorker> to;
  {
    MutexLock lock(&worker_->mu_);
    to = worker_->workers_.at(worker_->worker_of_stage_.at(a.peer));
  }
  sends_.push_back(to.RpcAsync<bool>("deliver", step_, a.carries_activation(),
                                     static_cast<int64_t>(a.peer),
                                     static_cast<int64_t>(a.micro_batch), value));
  return absl::OkStatus();
}

bool PlanWorker::Connect(std::vector<rref::RRef<PlanWorker>> workers, int64_t self,
                         std::vector<int64_t> worker_of_stage) {
  MutexLock lock(&mu_);
  if (self < 0 || self >= static_cast<int64_t>(workers.size())) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("worker ", self, " of a pipeline of ", workers.size())));
  }
  for (int64_t worker : worker_of_stage) {
    if (worker < 0 || worker >= static_cast<int64_t>(workers.size())) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("a stage placed on worker ", worker, " of ", workers.size())));
    }
  }
  workers_ = std::move(workers);
  self_ = self;
  worker_of_stage_ = std::move(worker_of_stage);
  return true;
}

Future<at::Tensor> PlanWorker::Incoming(const InboxKey& key) {
  MutexLock lock(&mu_);
  Letter& letter = inbox_[key];
  Future<at::Tensor> future = letter.promise.GetFuture();
  letter.awaited = true;
  if (letter.delivered) inbox_.erase(key);
  return future;
}

bool PlanWorker::Deliver(int64_t step, bool activation, int64_t stage, int64_t micro,
                         at::Tensor value) {
  Promise<at::Tensor> promise;
  {
    MutexLock lock(&mu_);
    const InboxKey key{step, activation, stage, micro};
    Letter& letter = inbox_[key];
    if (letter.delivered) {
      throw StatusError(absl::AlreadyExistsError(
          absl::StrCat("step ", step, ": the ", activation ? "activation" : "gradient",
                       " for stage ", stage, " micro-batch ", micro, " came twice")));
    }
    letter.delivered = true;
    promise = letter.promise;
    if (letter.awaited) inbox_.erase(key);
  }
  promise.Set(std::move(value));  // outside the lock: it runs the step's next actions
  return true;
}

bool PlanWorker::IsLastStage(int64_t stage) const {
  MutexLock lock(&mu_);
  return stage + 1 == static_cast<int64_t>(worker_of_stage_.size());
}

Future<std::vector<double>> PlanWorker::RunStep(rpc::CallContext& ctx, int64_t step,
                                                std::vector<int64_t> actions,
                                                std::vector<at::Tensor> inputs,
                                                std::vector<at::Tensor> targets,
                                                std::vector<double> weights) {
  auto& autograd = dist_autograd::DistAutograd::Of(*ctx.runtime);
  const std::optional<int64_t> context = autograd.current_context();
  if (!context.has_value()) {
    return Future<std::vector<double>>::Ready(absl::FailedPreconditionError(
        "a planned pipeline step runs inside a distributed autograd context"));
  }
  auto decoded = DecodeActions(actions);
  if (!decoded.ok()) return Future<std::vector<double>>::Ready(decoded.status());
  if (targets.size() != weights.size()) {
    return Future<std::vector<double>>::Ready(
        absl::InvalidArgumentError("one weight a target, for each micro-batch"));
  }
  auto run = std::make_shared<StepRun>(shared_from_this(), step, *context,
                                       autograd.shared_from_this(), *std::move(decoded),
                                       std::move(inputs), std::move(targets), std::move(weights));
  Future<std::vector<double>> done = run->done();
  run->Advance();
  return done;
}

std::vector<at::Tensor> PlanWorker::Gradients(rpc::CallContext& ctx, int64_t context_id,
                                              int64_t stage) {
  auto it = stages_.find(stage);
  if (it == stages_.end()) {
    throw StatusError(absl::NotFoundError(absl::StrCat("stage ", stage, " is not on this worker")));
  }
  return dist_autograd::DistAutograd::Of(*ctx.runtime)
      .GetGradients(context_id, it->second.parameters);
}

std::vector<rref::RRef<at::Tensor>> PlanWorker::ParameterRRefs(rpc::CallContext& ctx) {
  std::vector<at::Tensor> all;
  for (const auto& [stage, model] : stages_) {
    all.insert(all.end(), model.parameters.begin(), model.parameters.end());
  }
  return rref::MakeRRefs(ctx, all);
}

void RegisterPlanWorker(rref::ClassRegistry& classes, std::map<std::string, StageFactory> factories,
                        std::map<std::string, MicroBatchLoss> losses) {
  auto names = [](const auto& known) {
    std::vector<std::string> out;
    for (const auto& [name, unused] : known) out.push_back(name);
    return absl::StrJoin(out, ", ");
  };
  classes.Class<PlanWorker>("tessera.pipeline.PlanWorker")
      .Factory<std::vector<int64_t>, std::vector<std::string>, std::vector<int64_t>, std::string>(
          [factories = std::move(factories), losses = std::move(losses), names](
              std::vector<int64_t> stages, std::vector<std::string> models,
              std::vector<int64_t> seeds, std::string loss) {
            if (stages.size() != models.size() || stages.size() != seeds.size()) {
              throw StatusError(absl::InvalidArgumentError(
                  "a PlanWorker takes one model name and one seed a stage"));
            }
            auto found_loss = losses.find(loss);
            if (found_loss == losses.end()) {
              throw StatusError(absl::NotFoundError("no pipeline loss named '" + loss +
                                                    "' on this worker (known: " + names(losses) +
                                                    ")"));
            }
            std::map<int64_t, StageModel> held;
            for (size_t i = 0; i < stages.size(); ++i) {
              auto factory = factories.find(models[i]);
              if (factory == factories.end()) {
                throw StatusError(
                    absl::NotFoundError("no pipeline stage model named '" + models[i] +
                                        "' on this worker (known: " + names(factories) + ")"));
              }
              held.emplace(stages[i], factory->second(seeds[i]));
            }
            return std::make_shared<PlanWorker>(std::move(held), found_loss->second);
          })
      .Method("connect", &PlanWorker::Connect)
      .Method("deliver", &PlanWorker::Deliver)
      .Method("run_step", &PlanWorker::RunStep)
      .Method("gradients", &PlanWorker::Gradients)
      .Method("parameter_rrefs", &PlanWorker::ParameterRRefs);
}

}  // namespace tessera::pipeline
