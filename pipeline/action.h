// One step of a pipeline stage's work in a schedule (see Note [Schedules as
// data], pipeline/schedule_plan.h): a forward F, an input-gradient backward
// B, a weight-gradient backward W, both backwards at once (BW), or the
// transfer of an activation or a gradient to or from another worker.
#pragma once

#include <string>

namespace tessera::pipeline {

enum class ActionKind {
  kForward,         // F: the stage's forward of one micro-batch; keeps its activations
  kInputBackward,   // B: the gradient of the stage's input (what the stage before needs)
  kWeightBackward,  // W: the gradients of the stage's parameters; frees the activations
  kFullBackward,    // BW: B and W as one backward pass (GPipe, 1F1B)
  kSend,            // the output of F (an activation) or of B (a gradient) to `peer`
  kReceive,         // the same, from `peer`; waits until it has arrived
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;  // the stage that computes, sends or receives
  int micro_batch = 0;
  int peer = -1;  // kSend, kReceive: the stage on the other side

  bool is_compute() const { return kind != ActionKind::kSend && kind != ActionKind::kReceive; }
  // For a transfer: whether it carries an activation (forward, to a later
  // stage) rather than a gradient (backward, to an earlier one).
  bool carries_activation() const {
    return kind == ActionKind::kSend ? peer > stage : peer < stage;
  }
  bool operator==(const Action& other) const {
    return kind == other.kind && stage == other.stage && micro_batch == other.micro_batch &&
           peer == other.peer;
  }
};

inline Action Forward(int stage, int micro_batch) {
  return {ActionKind::kForward, stage, micro_batch};
}
inline Action InputBackward(int stage, int micro_batch) {
  return {ActionKind::kInputBackward, stage, micro_batch};
}
inline Action WeightBackward(int stage, int micro_batch) {
  return {ActionKind::kWeightBackward, stage, micro_batch};
}
inline Action FullBackward(int stage, int micro_batch) {
  return {ActionKind::kFullBackward, stage, micro_batch};
}

// "F3@1" (micro-batch 3's forward at stage 1), "B3@1", "W3@1", "BW3@1",
// "send act 3 1->2", "recv grad 3 2->1".
std::string ToString(const Action& action);

}  // namespace tessera::pipeline
