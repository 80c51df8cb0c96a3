// libFuzzer target for what the rendezvous store decodes of a caller before
// serving it (store/store_auth.h): the nonce and MAC from the call's
// metadata, checked over the request's bytes, and the replay window that a
// checked nonce feeds. (gRPC parses HTTP/2 and the protobuf request itself.)
// Input: [method byte][pieces: nonce, MAC, request bytes].
#include <grpcpp/support/status.h>

#include <string>

#include "proto/store.pb.h"
#include "store/store_auth.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

template <typename Request>
void Check(const tessera::store::StoreAuth& auth, const char* method, std::string_view nonce,
           std::string_view mac, std::string_view bytes) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  (void)auth.CheckRequest(nonce, mac, method, request);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::proto;
  if (size < 1) return 0;
  // One store across inputs, as a real one sees many callers.
  static const tessera::store::StoreAuth auth(tessera::auth::JobSecret("fuzz job secret"));
  tessera::fuzz::Pieces pieces(data + 1, size - 1);
  const std::string_view nonce = pieces.Next(), mac = pieces.Next(), request = pieces.Rest();
  switch (data[0] % 6) {
    case 0: Check<SetRequest>(auth, "Set", nonce, mac, request); break;
    case 1: Check<GetRequest>(auth, "Get", nonce, mac, request); break;
    case 2: Check<WaitRequest>(auth, "Wait", nonce, mac, request); break;
    case 3: Check<AddRequest>(auth, "Add", nonce, mac, request); break;
    case 4: Check<CompareSetRequest>(auth, "CompareSet", nonce, mac, request); break;
    default: Check<DeleteRequest>(auth, "Delete", nonce, mac, request); break;
  }
  return 0;
}
