#include "examples/common/worker_example.h"

#include <cstdio>

#include "examples/common/example_main.h"

namespace tessera::examples {

int RunWorkerExample(int argc, char** argv, const WorkerExample& example) {
  return ExampleMain(argc, argv, example.usage, [&](const std::string& program) {
    WorkerOptions options = WorkerOptions::FromEnv();
    if (options.world_size < example.min_world || options.world_size > example.max_world) {
      std::fprintf(stderr, "%s: %s\n", program.c_str(), example.requirement.c_str());
      return 2;
    }
    options.name = example.name(options.rank);
    auto worker = Worker::Start(options);
    const int status = example.run(*worker);
    worker->Shutdown();
    return status;
  });
}

}  // namespace tessera::examples
