// The first frame of a connection that passed the transport gate: what the
// listener checks before TensorPipe's core listener reads it (see Note [Hello
// gate], listener_impl.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera::rpc::guarded_tcp {

inline constexpr size_t kMaxHelloBytes = 64 << 10;

enum class HelloCheck {
  kIncomplete,  // a valid start: wait for more bytes
  kValid,       // a whole frame holding a TensorPipe hello
  kInvalid,     // not a TensorPipe peer: close it
};

// Checks `bytes`, the connection's first bytes as far as they arrived (an
// 8-byte length, then the frame); `why` says what is wrong when kInvalid.
HelloCheck CheckHelloFrame(std::string_view bytes, std::string* why);

}  // namespace tessera::rpc::guarded_tcp
