#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"

#include "absl/strings/str_cat.h"
#include "auth/mac.h"

namespace tessera::rpc::guarded_tcp {

GateClient::GateClient(auth::JobSecret secret)
    : secret_(std::move(secret)), nonce_(auth::RandomBytes(kGateNonceBytes)) {
  greeting_ = std::string(kGateMagic) + nonce_;
}

absl::StatusOr<std::string> GateClient::OnChallenge(std::string_view challenge) const {
  if (challenge.size() != kChallengeBytes) {
    return absl::UnauthenticatedError("malformed transport challenge");
  }
  const std::string_view server_nonce = challenge.substr(0, kGateNonceBytes);
  const std::string_view server_mac = challenge.substr(kGateNonceBytes);
  if (!auth::SameMac(server_mac, auth::Mac(secret_, {"gate-server", nonce_, server_nonce}))) {
    return absl::UnauthenticatedError(
        "the listener did not prove the job secret (TESSERA_JOB_SECRET differs, or this is not "
        "a worker of this job)");
  }
  return auth::Mac(secret_, {"gate-client", server_nonce, nonce_});
}

GateServer::GateServer(auth::JobSecret secret) : secret_(std::move(secret)) {}

absl::StatusOr<std::string> GateServer::OnGreeting(std::string_view greeting) {
  if (greeting.size() != kGreetingBytes || greeting.substr(0, kGateMagic.size()) != kGateMagic) {
    return absl::UnauthenticatedError("not a Tessera connection (no transport greeting)");
  }
  client_nonce_ = std::string(greeting.substr(kGateMagic.size()));
  server_nonce_ = auth::RandomBytes(kGateNonceBytes);
  return absl::StrCat(server_nonce_,
                      auth::Mac(secret_, {"gate-server", client_nonce_, server_nonce_}));
}

absl::Status GateServer::OnProof(std::string_view proof) const {
  if (server_nonce_.empty()) return absl::FailedPreconditionError("proof before greeting");
  if (proof.size() != kProofBytes ||
      !auth::SameMac(proof, auth::Mac(secret_, {"gate-client", server_nonce_, client_nonce_}))) {
    return absl::UnauthenticatedError("the peer did not prove the job secret");
  }
  return absl::OkStatus();
}

}  // namespace tessera::rpc::guarded_tcp
