#include "common/broken_pipe.h"

#include <signal.h>

namespace tessera {

void IgnoreBrokenPipeSignals() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace tessera
