// Runs a benchmark as several processes on loopback: this one is rank 0;
// ranks 1.. are this program re-executed with "--rank <r> <port>" in front
// of the original arguments. The rendezvous store runs in a process of its
// own on a free port, as tessera-run hosts it in the launcher: a store in
// rank 0 would add gRPC polling threads to the process being measured
// (gRPC's epoll poller lets any of a process's polling threads take any
// connection's events, which costs the gRPC agent a thread hop per message).
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

// The job secret of benchmark processes (the store and every rank), as
// tessera-run gives every job one: calls pay for signing and the handshake
// as in real jobs. On loopback the ranks only need to agree on it.
inline auth::JobSecret BenchJobSecret() { return auth::JobSecret("tessera-bench-loopback"); }

inline int RunProcesses(int argc, char** argv, int world_size, const RankMain& rank_main) {
  if (argc > 3 && std::strcmp(argv[1], "--rank") == 0) {
    return rank_main(std::atoi(argv[2]), std::atoi(argv[3]),
                     std::vector<std::string>(argv + 4, argv + argc));
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  int port_pipe[2], quit_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(quit_pipe) != 0) return 1;
  // Forked before this process touches gRPC: its threads do not survive fork.
  const pid_t store_process = fork();
  if (store_process == 0) {
    close(quit_pipe[1]);
    auto store = store::StoreServer::Start("127.0.0.1", 0, BenchJobSecret());
    const int store_port = store.ok() ? (*store)->port() : 0;
    if (write(port_pipe[1], &store_port, sizeof(store_port)) != sizeof(store_port)) _exit(1);
    char c;
    if (read(quit_pipe[0], &c, 1) < 0) {}  // rank 0 closes its end when done
    _exit(0);
  }
  close(port_pipe[1]);
  close(quit_pipe[0]);
  int store_port = 0;
  if (read(port_pipe[0], &store_port, sizeof(store_port)) != sizeof(store_port) ||
      store_port == 0) {
    return 1;
  }
  const std::string port = std::to_string(store_port);
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
  const int code = rank_main(0, store_port, args);
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
  }
  close(quit_pipe[1]);
  int status = 0;
  waitpid(store_process, &status, 0);
  return code;
}

inline int RunTwoProcesses(int argc, char** argv, const RankMain& rank_main) {
  return RunProcesses(argc, argv, 2, rank_main);
}

}  // namespace tessera::bench
