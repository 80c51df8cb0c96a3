#include "examples/common/example_main.h"

#include <cstdio>
#include <exception>

#include "common/flags.h"

namespace tessera::examples {

int ExampleMain(int argc, char** argv, const std::string& usage,
                const std::function<int(const std::string& program)>& body) {
  ParseFlags(argc, argv, usage);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string path = argv[0];
  const std::string program = path.substr(path.rfind('/') + 1);
  try {
    return body(program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
    return 1;
  }
}

}  // namespace tessera::examples
