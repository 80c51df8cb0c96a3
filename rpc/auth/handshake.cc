#include "rpc/auth/handshake.h"

#include "absl/strings/str_cat.h"
#include "auth/mac.h"

namespace tessera::rpc {
namespace {

constexpr size_t kNonceBytes = 32;
constexpr char kProtocol[] = "tessera-auth-v1";

absl::Status Expect(const proto::Envelope& envelope, proto::AuthStep::StepCase step,
                    const char* what) {
  if (envelope.kind() == proto::AUTH && envelope.status().code() != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "worker '", envelope.status().origin_worker(), "' refused the connection: ",
        envelope.status().message()));
  }
  if (envelope.kind() != proto::AUTH || envelope.auth().step_case() != step) {
    return absl::UnauthenticatedError(
        absl::StrCat("expected the handshake's ", what, " before anything else"));
  }
  return absl::OkStatus();
}

proto::Envelope AuthEnvelope() {
  proto::Envelope envelope;
  envelope.set_kind(proto::AUTH);
  return envelope;
}

}  // namespace

std::string ServerProof(const auth::JobSecret& secret, const std::string& client_nonce,
                        const std::string& server_nonce) {
  return auth::Mac(secret, {kProtocol, "server", client_nonce, server_nonce});
}

std::string ClientProof(const auth::JobSecret& secret, const std::string& server_nonce,
                        const std::string& client_nonce, const PeerIdentity& client) {
  return auth::Mac(secret, {kProtocol, "client", server_nonce, client_nonce, client.name,
                            std::to_string(client.rank)});
}

ClientHandshake::ClientHandshake(auth::JobSecret secret, PeerIdentity self)
    : secret_(std::move(secret)),
      self_(std::move(self)),
      client_nonce_(auth::RandomBytes(kNonceBytes)) {}

proto::Envelope ClientHandshake::Hello() {
  proto::Envelope envelope = AuthEnvelope();
  auto* hello = envelope.mutable_auth()->mutable_hello();
  hello->set_worker_name(self_.name);
  hello->set_rank(self_.rank);
  hello->set_nonce(client_nonce_);
  hello->set_incarnation(self_.incarnation);
  return envelope;
}

absl::StatusOr<proto::Envelope> ClientHandshake::OnChallenge(const proto::Envelope& challenge) {
  auto status = Expect(challenge, proto::AuthStep::kChallenge, "challenge");
  if (!status.ok()) return status;
  const auto& step = challenge.auth().challenge();
  if (!auth::SameMac(step.proof(), ServerProof(secret_, client_nonce_, step.nonce()))) {
    return absl::UnauthenticatedError(
        "the peer could not prove it knows the job secret (TESSERA_JOB_SECRET differs)");
  }
  proto::Envelope envelope = AuthEnvelope();
  envelope.mutable_auth()->mutable_proof()->set_proof(
      ClientProof(secret_, step.nonce(), client_nonce_, self_));
  return envelope;
}

absl::Status ClientHandshake::OnResult(const proto::Envelope& result) const {
  return Expect(result, proto::AuthStep::kAccepted, "acceptance");
}

ServerHandshake::ServerHandshake(auth::JobSecret secret) : secret_(std::move(secret)) {}

absl::StatusOr<proto::Envelope> ServerHandshake::OnHello(const proto::Envelope& hello) {
  auto status = Expect(hello, proto::AuthStep::kHello, "hello");
  if (!status.ok()) return status;
  const auto& step = hello.auth().hello();
  if (step.nonce().size() != kNonceBytes || step.rank() < 0 || step.worker_name().empty()) {
    return absl::UnauthenticatedError("malformed handshake hello");
  }
  peer_ = PeerIdentity{step.worker_name(), step.rank(), step.incarnation()};
  client_nonce_ = step.nonce();
  server_nonce_ = auth::RandomBytes(kNonceBytes);
  challenged_ = true;
  proto::Envelope envelope = AuthEnvelope();
  auto* challenge = envelope.mutable_auth()->mutable_challenge();
  challenge->set_nonce(server_nonce_);
  challenge->set_proof(ServerProof(secret_, client_nonce_, server_nonce_));
  return envelope;
}

absl::StatusOr<PeerIdentity> ServerHandshake::OnProof(const proto::Envelope& proof) {
  auto status = Expect(proof, proto::AuthStep::kProof, "proof");
  if (!status.ok()) return status;
  if (!challenged_ || !auth::SameMac(proof.auth().proof().proof(),
                                     ClientProof(secret_, server_nonce_, client_nonce_, peer_))) {
    return absl::UnauthenticatedError(absl::StrCat(
        "'", peer_.name, "' (rank ", peer_.rank,
        ") could not prove it knows the job secret (wrong or missing TESSERA_JOB_SECRET)"));
  }
  return peer_;
}

proto::Envelope ServerHandshake::Accepted() {
  proto::Envelope envelope = AuthEnvelope();
  envelope.mutable_auth()->mutable_accepted();
  return envelope;
}

proto::Envelope ServerHandshake::Rejected(const absl::Status& why,
                                          const std::string& server_name) {
  proto::Envelope envelope = AuthEnvelope();
  envelope.mutable_status()->set_code(static_cast<int>(absl::StatusCode::kUnauthenticated));
  envelope.mutable_status()->set_message(std::string(why.message()));
  envelope.mutable_status()->set_origin_worker(server_name);
  return envelope;
}

}  // namespace tessera::rpc
