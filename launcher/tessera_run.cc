// tessera-run: see launcher/launcher.h.
//   tessera-run --nproc_per_node 2 --standalone ./train --epochs 3
#include <cstdio>

#include "launcher/launcher.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = tessera::launcher::ParseArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr,
                 "tessera-run: %s\nusage: tessera-run [--nproc_per_node N] [--nnodes N] "
                 "[--node_rank R] [--master_addr A] [--master_port P] [--standalone] "
                 "[--max_restarts N] program [args...]\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return tessera::launcher::Run(*options);
}
