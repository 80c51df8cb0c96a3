#include "rpc/idle_connections.h"

namespace tessera::rpc {

bool ConnectionUse::Claim() {
  MutexLock lock(&mu_);
  if (closing_) return false;
  ++in_flight_;
  if (idle_) {
    idle_ = false;
    idle_since_ = absl::InfiniteFuture();
    --*idle_count_;
  }
  return true;
}

bool ConnectionUse::Release() {
  MutexLock lock(&mu_);
  if (in_flight_ == 0 || --in_flight_ > 0 || ended_ || closing_) return false;
  idle_ = true;
  idle_since_ = absl::Now();
  ++*idle_count_;
  return true;
}

void ConnectionUse::Ended() {
  MutexLock lock(&mu_);
  ended_ = true;
  if (idle_) {
    idle_ = false;
    idle_since_ = absl::InfiniteFuture();
    --*idle_count_;
  }
}

bool ConnectionUse::CloseIfIdle() {
  MutexLock lock(&mu_);
  if (!idle_) return false;
  idle_ = false;
  idle_since_ = absl::InfiniteFuture();
  closing_ = true;
  --*idle_count_;
  return true;
}

bool ConnectionUse::closing() const {
  MutexLock lock(&mu_);
  return closing_;
}

absl::Time ConnectionUse::idle_since() const {
  MutexLock lock(&mu_);
  return idle_since_;
}

}  // namespace tessera::rpc
