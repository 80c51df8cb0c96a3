#include "rpc/tensorpipe/guarded_tcp/hello_frame.h"

#include <cstdint>
#include <cstring>

#include "rpc/tensorpipe/guarded_tcp/bounded_nop.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

HelloCheck CheckHelloFrame(std::string_view bytes, std::string* why) {
  uint64_t length = 0;
  if (bytes.size() < sizeof(length)) return HelloCheck::kIncomplete;
  std::memcpy(&length, bytes.data(), sizeof(length));
  if (length > kMaxHelloBytes) {
    *why = "first frame announces " + std::to_string(length) + " bytes (not a peer)";
    return HelloCheck::kInvalid;
  }
  if (bytes.size() < sizeof(length) + length) return HelloCheck::kIncomplete;
  tensorpipe::NopHolder<tensorpipe::Packet> hello;
  if (!ReadNopBounded(hello, bytes.data() + sizeof(length), length) ||
      hello.getObject().empty()) {
    *why = "first frame is not a TensorPipe hello";
    return HelloCheck::kInvalid;
  }
  return HelloCheck::kValid;
}

}  // namespace tessera::rpc::guarded_tcp
