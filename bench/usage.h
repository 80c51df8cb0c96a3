// --help for the benchmarks, which read their few arguments themselves:
// GNU's convention, as for every program of Tessera's (README) — the usage
// on standard output, exit status 0. Other arguments are the program's.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera::bench {

inline void ExitOnHelp(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      std::exit(0);
    }
  }
}

}  // namespace tessera::bench
