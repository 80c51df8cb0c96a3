// libFuzzer target for the connection handshake's messages (rpc/auth/
// handshake.h), both sides: what a peer that passed the transport (and, on
// gRPC, anyone who reaches the port) sends before it has proved anything.
// Input: [side byte][pieces: envelope bytes, one per step]. Each piece is
// parsed as an Envelope the way the agents parse frames (rpc/codec.h).
#include <string>

#include "rpc/auth/handshake.h"
#include "rpc/codec.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace tessera::rpc;

const tessera::auth::JobSecret& Secret() {
  static const tessera::auth::JobSecret secret("fuzz job secret");
  return secret;
}

bool Parse(std::string_view bytes, tessera::proto::Envelope* envelope) {
  auto parsed = ParseEnvelope(std::string(bytes), CodecLimits{});
  if (!parsed.ok()) return false;
  *envelope = *std::move(parsed);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  tessera::fuzz::Pieces pieces(data + 1, size - 1);
  tessera::proto::Envelope envelope;
  if (data[0] % 2 == 0) {  // the accepting worker
    ServerHandshake server(Secret());
    if (!Parse(pieces.Next(), &envelope) || !server.OnHello(envelope).ok()) return 0;
    if (!Parse(pieces.Next(), &envelope)) return 0;
    (void)server.OnProof(envelope);
  } else {  // the calling worker
    ClientHandshake client(Secret(), PeerIdentity{"worker0", 0});
    (void)client.Hello();
    if (!Parse(pieces.Next(), &envelope) || !client.OnChallenge(envelope).ok()) return 0;
    if (!Parse(pieces.Next(), &envelope)) return 0;
    (void)client.OnResult(envelope);
  }
  return 0;
}
