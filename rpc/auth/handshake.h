// The connection handshake both transports run before serving a request.
//
//   connecting worker (client)            accepting worker (server)
//   hello {name, rank, nc}          -->
//                                   <--   challenge {ns, HMAC(k, "server"|nc|ns)}
//   proof {HMAC(k, "client"|ns|nc|name|rank)} -->
//                                   <--   accepted   (or an UNAUTHENTICATED status)
//
// k is the job secret, nc and ns fresh 32-byte nonces. Each side checks the
// other's proof, so neither talks to a stranger; the client's proof covers
// the server's fresh nonce, so a recorded handshake fails when replayed.
// After `accepted` the connection carries requests from the identity in the
// hello; the server attributes every request to that identity, whatever its
// envelope claims. (Every worker of a job knows k, so one worker can claim
// another's name: the handshake keeps strangers out, not members apart.)
//
// These classes are the state machines; the transports move the envelopes.
// Not thread-safe: one per connection, driven by that connection's reads.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "auth/job_secret.h"
#include "proto/rpc.pb.h"

namespace tessera::rpc {

// Who a connection's peer proved to be.
struct PeerIdentity {
  std::string name;
  int rank = -1;
  // Said in the hello, not covered by the proof: it fences off a stale
  // process, not a member posing as another (see above).
  int incarnation = 0;
};

class ClientHandshake {
 public:
  ClientHandshake(auth::JobSecret secret, PeerIdentity self);

  // The first envelope to send.
  proto::Envelope Hello();
  // Checks the server's challenge; returns the proof to send, or
  // Unauthenticated if the server does not know the secret.
  absl::StatusOr<proto::Envelope> OnChallenge(const proto::Envelope& challenge);
  // OK once the server accepted; its rejection (or anything else) otherwise.
  absl::Status OnResult(const proto::Envelope& result) const;

 private:
  auth::JobSecret secret_;
  PeerIdentity self_;
  std::string client_nonce_;
};

class ServerHandshake {
 public:
  explicit ServerHandshake(auth::JobSecret secret);

  // Checks the hello; returns the challenge to send.
  absl::StatusOr<proto::Envelope> OnHello(const proto::Envelope& hello);
  // Checks the client's proof; returns who the peer is.
  absl::StatusOr<PeerIdentity> OnProof(const proto::Envelope& proof);

  static proto::Envelope Accepted();
  // What a rejected peer receives before the connection closes.
  static proto::Envelope Rejected(const absl::Status& why, const std::string& server_name);

 private:
  auth::JobSecret secret_;
  PeerIdentity peer_;
  std::string client_nonce_;
  std::string server_nonce_;
  bool challenged_ = false;
};

// Proofs, exposed for tests that play a hostile client.
std::string ServerProof(const auth::JobSecret& secret, const std::string& client_nonce,
                        const std::string& server_nonce);
std::string ClientProof(const auth::JobSecret& secret, const std::string& server_nonce,
                        const std::string& client_nonce, const PeerIdentity& client);

}  // namespace tessera::rpc
