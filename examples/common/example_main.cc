#include "examples/common/example_main.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>

#include "absl/strings/str_cat.h"
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

namespace {
std::string DoneKey(const std::string& example, int rank) {
  return absl::StrCat(example, "/done/", rank);
}
}  // namespace

void MarkDone(rpc::Runtime& runtime, const std::string& example, int rank) {
  ThrowIfError(runtime.store().Set(DoneKey(example, rank), "1"));
}

void WaitUntilDone(rpc::Runtime& runtime, const std::string& example, int first_rank,
                   int end_rank) {
  std::vector<std::string> keys;
  for (int rank = first_rank; rank < end_rank; ++rank) keys.push_back(DoneKey(example, rank));
  ThrowIfError(runtime.store().Wait(keys, absl::Hours(2)));
}

}  // namespace tessera::examples
