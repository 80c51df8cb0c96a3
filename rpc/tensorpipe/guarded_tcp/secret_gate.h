// SecretGate: the job-secret proof every guarded TCP connection makes before
// TensorPipe sees a byte of it.
//
// Note [Transport gate]
// TensorPipe parses what a connection sends (its hello, brochures, frames)
// with code that trusts the peer: an 8-byte zero frame sent to a worker's
// port made TensorPipe's nop reader dereference a null pointer and killed
// the worker. So, before a connection is handed to TensorPipe, both ends
// prove they hold the job secret, in fixed-size messages that Tessera reads
// itself (no length field a stranger could lie in):
//
//   connecting side                            listening side
//   greeting: "TSRGATE1" | nc (32)       -->
//                                        <--   challenge: ns (32) | HMAC(k, "gate-server", nc, ns)
//   proof: HMAC(k, "gate-client", ns, nc) -->
//
// k is the job secret, nc and ns fresh nonces; each side checks the other's
// MAC, so neither hands TensorPipe a connection from a stranger, and a
// recorded exchange does not verify against a fresh nonce. Without a secret
// the gate runs with an empty key: it then proves nothing but still frames
// the start of every connection the same way (and the agent warns at start).
// The agent's handshake (rpc/auth/handshake.h) runs afterwards, inside
// TensorPipe, to tell which worker the peer is.
//
// These are the state machines; the transport moves the bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "auth/job_secret.h"

namespace tessera::rpc::guarded_tcp {

inline constexpr std::string_view kGateMagic = "TSRGATE1";
inline constexpr size_t kGateNonceBytes = 32;
inline constexpr size_t kGateMacBytes = 32;
inline constexpr size_t kGreetingBytes = kGateMagic.size() + kGateNonceBytes;
inline constexpr size_t kChallengeBytes = kGateNonceBytes + kGateMacBytes;
inline constexpr size_t kProofBytes = kGateMacBytes;

class GateClient {
 public:
  explicit GateClient(auth::JobSecret secret);
  // The first kGreetingBytes to send.
  const std::string& greeting() const { return greeting_; }
  // Checks the listener's challenge (exactly kChallengeBytes); returns the
  // proof to send, or Unauthenticated if the listener does not know the secret.
  absl::StatusOr<std::string> OnChallenge(std::string_view challenge) const;

 private:
  auth::JobSecret secret_;
  std::string nonce_;
  std::string greeting_;
};

class GateServer {
 public:
  explicit GateServer(auth::JobSecret secret);
  // Checks a greeting (exactly kGreetingBytes); returns the challenge to send.
  absl::StatusOr<std::string> OnGreeting(std::string_view greeting);
  // Checks the peer's proof (exactly kProofBytes).
  absl::Status OnProof(std::string_view proof) const;

 private:
  auth::JobSecret secret_;
  std::string client_nonce_;
  std::string server_nonce_;
};

}  // namespace tessera::rpc::guarded_tcp
