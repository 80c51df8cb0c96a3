#include "examples/common/worker_example.h"

#include <cstdio>
#include <exception>

#include "common/flags.h"

namespace tessera::examples {

int RunWorkerExample(int argc, char** argv, const WorkerExample& example) {
  ParseFlags(argc, argv, example.usage);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    WorkerOptions options = WorkerOptions::FromEnv();
    if (options.world_size < example.min_world || options.world_size > example.max_world) {
      std::fprintf(stderr, "%s: %s\n", example.program.c_str(), example.requirement.c_str());
      return 2;
    }
    options.name = example.name(options.rank);
    auto worker = Worker::Start(options);
    const int status = example.run(*worker);
    worker->Shutdown();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", example.program.c_str(), e.what());
    return 1;
  }
}

}  // namespace tessera::examples
