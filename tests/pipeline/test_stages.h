// A small MLP in two pipeline stages, for tests: "front" = tanh(x W1^T + b1)
// (6 -> 8), "hidden" = tanh(h W^T + b) (8 -> 8), "back" = h W2^T + b2
// (8 -> 3), each initialised from its seed.
#pragma once

#include <map>
#include <string>

#include "pipeline/stage.h"

namespace tessera::testing {

std::map<std::string, pipeline::StageFactory> TestStageFactories();

}  // namespace tessera::testing
