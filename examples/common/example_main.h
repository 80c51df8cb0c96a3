// The one main() of every example: parses the flags (common/flags.h, so
// --help prints `usage` and the flags and exits 0), keeps stdout
// line-buffered (lines from several processes under tessera-run stay
// whole), runs `body` with the program's name and returns its exit code.
// An exception from `body` prints as "<program>: <error>" and exits 1.
//
//   int main(int argc, char** argv) {
//     return tessera::examples::ExampleMain(argc, argv, "What it does; how to run it.",
//                                           [](const std::string& program) { return Run(); });
//   }
//
// RunExample (training.h) and RunWorkerExample (worker_example.h) build on it.
#pragma once

#include <functional>
#include <string>

namespace tessera::examples {

int ExampleMain(int argc, char** argv, const std::string& usage,
                const std::function<int(const std::string& program)>& body);

}  // namespace tessera::examples
