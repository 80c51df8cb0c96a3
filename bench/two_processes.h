// Runs a benchmark as two processes on loopback: this one is rank 0 and
// hosts a rendezvous store on a free port; rank 1 is this program
// re-executed with "--rank1 <port>" in front of the original arguments.
// `rank_main(rank, port, args)` runs in both; rank 0's return value is the
// exit code, after rank 1 has exited.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "store/store_server.h"

namespace tessera::bench {

using RankMain = std::function<int(int rank, int port, const std::vector<std::string>& args)>;

inline int RunTwoProcesses(int argc, char** argv, const RankMain& rank_main) {
  if (argc > 2 && std::strcmp(argv[1], "--rank1") == 0) {
    return rank_main(1, std::atoi(argv[2]), std::vector<std::string>(argv + 3, argv + argc));
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto store = store::StoreServer::Start("127.0.0.1", 0);
  if (!store.ok()) return 1;
  const std::string port = std::to_string((*store)->port());
  const pid_t child = fork();
  if (child == 0) {
    std::vector<char*> child_argv = {argv[0], const_cast<char*>("--rank1"),
                                     const_cast<char*>(port.c_str())};
    for (int i = 1; i < argc; ++i) child_argv.push_back(argv[i]);
    child_argv.push_back(nullptr);
    execv("/proc/self/exe", child_argv.data());
    _exit(127);
  }
  const int code = rank_main(0, (*store)->port(), args);
  int status = 0;
  waitpid(child, &status, 0);
  return code;
}

}  // namespace tessera::bench
