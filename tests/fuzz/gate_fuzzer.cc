// libFuzzer target for the bytes a stranger sends first to a TensorPipe
// worker's port, and for TensorPipe's control objects from a peer:
//   mode 0: the listener's side of the transport gate (greeting, proof,
//           see Note [Transport gate]), then the first frame's check (see Note
//           [Hello gate]) — the order the listener reads them in;
//   mode 1: the connecting side's check of a listener's challenge;
//   mode 2-6: bounded nop reads (see Note [Bounded nop reads]) of every control
//           object TensorPipe's core reads from a connection.
// Input: [mode byte][pieces (fuzz_support.h)]. Crashes, sanitizer reports
// and oversized allocations are bugs; errors are expected.

#include <string>

#include "rpc/tensorpipe/guarded_tcp/bounded_nop.h"
#include "rpc/tensorpipe/guarded_tcp/hello_frame.h"
#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace tessera::rpc::guarded_tcp;
namespace tp = tensorpipe;

// The secret of the seeds (tests/fuzz/write_seeds.cc).
const tessera::auth::JobSecret& Secret() {
  static const tessera::auth::JobSecret secret("fuzz job secret");
  return secret;
}

template <typename T>
void ReadBounded(std::string_view bytes) {
  tp::NopHolder<T> holder;
  (void)ReadNopBounded(holder, bytes.data(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  tessera::fuzz::Pieces pieces(data + 1, size - 1);
  switch (data[0] % 7) {
    case 0: {
      GateServer gate(Secret());
      if (!gate.OnGreeting(pieces.Next()).ok()) return 0;
      (void)gate.OnProof(pieces.Next());  // a MAC over a fresh nonce: never passes
      std::string why;
      (void)CheckHelloFrame(pieces.Rest(), &why);
      return 0;
    }
    case 1:
      (void)GateClient(Secret()).OnChallenge(pieces.Rest());
      return 0;
    case 2:
      ReadBounded<tp::Packet>(pieces.Rest());
      return 0;
    case 3:
      ReadBounded<tp::Brochure>(pieces.Rest());
      return 0;
    case 4:
      ReadBounded<tp::BrochureAnswer>(pieces.Rest());
      return 0;
    case 5:
      ReadBounded<tp::Descriptor>(pieces.Rest());
      return 0;
    default:
      ReadBounded<tp::DescriptorReply>(pieces.Rest());
      return 0;
  }
}
