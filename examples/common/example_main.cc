#include "examples/common/example_main.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>

#include "common/status.h"

namespace tessera::examples {

int RunExample(int argc, char** argv, const char* program, TrainingFlags defaults,
               const std::function<int(const TrainingFlags&, rpc::RpcOptions)>& run) {
  try {
    const TrainingFlags flags = ParseTrainingFlags(argc, argv, std::move(defaults));
    at::set_num_threads(1);
    return run(flags, ValueOrThrow(rpc::RpcOptions::FromEnv()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

void Require(bool holds, const std::string& requirement) {
  if (!holds) throw StatusError(absl::InvalidArgumentError(requirement));
}

}  // namespace tessera::examples
