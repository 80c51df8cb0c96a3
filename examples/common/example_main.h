// main() of the RPC training examples, minus what differs between them.
#pragma once

#include <functional>

#include "examples/common/training.h"
#include "rpc/runtime.h"

namespace tessera::examples {

// Parses the training flags over `defaults`, gives this process one compute
// thread (the machine's cores go to the processes), reads RpcOptions from
// the environment as tessera-run sets them, and returns run(flags, options).
// Any exception prints as "<program>: <error>" and exits with 1.
int RunExample(int argc, char** argv, const char* program, TrainingFlags defaults,
               const std::function<int(const TrainingFlags&, rpc::RpcOptions)>& run);

// Throws InvalidArgument with `requirement` unless `holds`.
void Require(bool holds, const std::string& requirement);

}  // namespace tessera::examples
