// main() of the examples that run as named RPC workers (batched serving,
// reinforcement learning, the model-parallel RNN), on ExampleMain
// (example_main.h): checks the world size, names each rank, starts the
// Worker, runs `run` and shuts the worker down (once every worker is done;
// `run` may already have). A wrong world size prints `requirement` and
// exits 2.
#pragma once

#include <functional>
#include <string>

#include "tessera/worker.h"

namespace tessera::examples {

struct WorkerExample {
  std::string usage;
  int min_world = 2;
  int max_world = 1 << 20;
  std::string requirement;  // said when the world size is out of range
  std::function<std::string(int rank)> name;
  // Runs on each worker (after it started); returns the exit code.
  std::function<int(Worker& worker)> run;
};

int RunWorkerExample(int argc, char** argv, const WorkerExample& example);

}  // namespace tessera::examples
