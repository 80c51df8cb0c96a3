// JobSecret: the shared secret every worker of a job proves it knows before
// any of its requests is served (rpc/auth/handshake.h).
//
// It comes from the environment, never from the command line (which other
// users of the host can read in /proc): TESSERA_JOB_SECRET holds it, or
// TESSERA_JOB_SECRET_FILE names a file holding it (trailing newlines are
// dropped; the file should be readable by the job's user only). tessera-run
// makes a fresh random one per job when neither is set.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tessera::auth {

class JobSecret {
 public:
  // No secret: the handshake still runs (so a worker with a secret rejects
  // one without), but proves nothing to anyone who can reach the port.
  JobSecret() = default;
  explicit JobSecret(std::string value) : value_(std::move(value)) {}

  // From TESSERA_JOB_SECRET or TESSERA_JOB_SECRET_FILE (an error if both are
  // set, or the file cannot be read or is empty); empty if neither is set.
  static absl::StatusOr<JobSecret> FromEnv();

  bool empty() const { return value_.empty(); }
  const std::string& value() const { return value_; }

 private:
  std::string value_;
};

// `bytes` fresh random bytes from the OS's CSPRNG (for nonces and secrets).
std::string RandomBytes(size_t bytes);

}  // namespace tessera::auth
