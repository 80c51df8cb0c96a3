// CapturedSignals: tessera-run reads SIGINT, SIGTERM and SIGCHLD from a
// signalfd instead of handling them. From construction to destruction the
// three are blocked in the calling thread — and so in every thread it starts
// (the store's gRPC threads included: a SIGCHLD delivered to one of those
// would be discarded and a worker's exit go unnoticed) — and SIGCHLD has its
// default disposition (ignored, children would be reaped silently). The
// destructor closes the descriptor and restores the mask, on every way out.
#pragma once

#include <signal.h>

namespace tessera::launcher {

class CapturedSignals {
 public:
  // Construct before any thread exists.
  CapturedSignals();
  ~CapturedSignals();
  CapturedSignals(const CapturedSignals&) = delete;
  CapturedSignals& operator=(const CapturedSignals&) = delete;

  // Readable when one of the signals arrived (struct signalfd_siginfo).
  int fd() const { return fd_; }
  // The mask before: what workers start with.
  const sigset_t& original_mask() const { return original_; }

 private:
  sigset_t original_;
  int fd_ = -1;
};

}  // namespace tessera::launcher
