#include "launcher/captured_signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

namespace tessera::launcher {

CapturedSignals::CapturedSignals() {
  ::signal(SIGCHLD, SIG_DFL);
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, &original_);
  fd_ = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
}

CapturedSignals::~CapturedSignals() {
  if (fd_ >= 0) close(fd_);
  sigprocmask(SIG_SETMASK, &original_, nullptr);
}

}  // namespace tessera::launcher
