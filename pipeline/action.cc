#include "pipeline/action.h"

#include "absl/strings/str_cat.h"

namespace tessera::pipeline {

std::string ToString(const Action& action) {
  switch (action.kind) {
    case ActionKind::kForward:
      return absl::StrCat("F", action.micro_batch, "@", action.stage);
    case ActionKind::kInputBackward:
      return absl::StrCat("B", action.micro_batch, "@", action.stage);
    case ActionKind::kWeightBackward:
      return absl::StrCat("W", action.micro_batch, "@", action.stage);
    case ActionKind::kFullBackward:
      return absl::StrCat("BW", action.micro_batch, "@", action.stage);
    case ActionKind::kSend:
      return absl::StrCat("send ", action.carries_activation() ? "act " : "grad ",
                          action.micro_batch, " ", action.stage, "->", action.peer);
    case ActionKind::kReceive:
      return absl::StrCat("recv ", action.carries_activation() ? "act " : "grad ",
                          action.micro_batch, " ", action.peer, "->", action.stage);
  }
  return "?";
}

}  // namespace tessera::pipeline
