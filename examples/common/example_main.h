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

// How the workers that serve (parameter servers, pipeline stages) learn
// that the ones that train have finished: each trainer marks itself done in
// the store under `example`'s prefix, and the servers wait (up to 2 hours)
// for ranks [first_rank, end_rank) to have done so.
void MarkDone(rpc::Runtime& runtime, const std::string& example, int rank);
void WaitUntilDone(rpc::Runtime& runtime, const std::string& example, int first_rank,
                   int end_rank);

}  // namespace tessera::examples
