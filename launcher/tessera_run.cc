// tessera-run: see launcher/launcher.h; `tessera-run --help` lists the flags.
//   tessera-run --nproc_per_node 2 --standalone ./train --epochs 3
#include <cstdio>

#include "common/descriptor_limit.h"
#include "launcher/launcher.h"

int main(int argc, char** argv) {
  auto options = tessera::launcher::ParseArgs(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "tessera-run: %s (--help lists the flags)\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  tessera::RaiseDescriptorLimit();  // for its workers too (see Note [Descriptor limit])
  return tessera::launcher::Run(*options);
}
