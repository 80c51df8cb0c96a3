// Runs a benchmark as several processes on loopback: this one is rank 0 and
// hosts a rendezvous store on a free port; ranks 1.. are this program
// re-executed with "--rank <r> <port>" in front of the original arguments.
// `rank_main(rank, port, args)` runs in all; rank 0's return value is the
// exit code, after the others have exited.
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

inline int RunProcesses(int argc, char** argv, int world_size, const RankMain& rank_main) {
  if (argc > 3 && std::strcmp(argv[1], "--rank") == 0) {
    return rank_main(std::atoi(argv[2]), std::atoi(argv[3]),
                     std::vector<std::string>(argv + 4, argv + argc));
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto store = store::StoreServer::Start("127.0.0.1", 0);
  if (!store.ok()) return 1;
  const std::string port = std::to_string((*store)->port());
  std::vector<pid_t> children;
  for (int rank = 1; rank < world_size; ++rank) {
    const std::string rank_arg = std::to_string(rank);
    const pid_t child = fork();
    if (child == 0) {
      std::vector<char*> child_argv = {argv[0], const_cast<char*>("--rank"),
                                       const_cast<char*>(rank_arg.c_str()),
                                       const_cast<char*>(port.c_str())};
      for (int i = 1; i < argc; ++i) child_argv.push_back(argv[i]);
      child_argv.push_back(nullptr);
      execv("/proc/self/exe", child_argv.data());
      _exit(127);
    }
    children.push_back(child);
  }
  const int code = rank_main(0, (*store)->port(), args);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
  }
  return code;
}

inline int RunTwoProcesses(int argc, char** argv, const RankMain& rank_main) {
  return RunProcesses(argc, argv, 2, rank_main);
}

}  // namespace tessera::bench
