// The address of a guarded transport's socket, parsed from and printed as
//   "host:port"   IPv4 ("[v6]:port" for IPv6): the TCP transport's;
//   "@name"       a Linux abstract Unix-domain socket: the same-host
//                 transport's (guarded_unix.h). Abstract names live in the
//                 network namespace, not the file system: nothing to clean
//                 up when a process is SIGKILLed, and no path to collide.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class SocketAddress final : public tensorpipe::Sockaddr {
 public:
  static std::optional<SocketAddress> Parse(const std::string& text);
  SocketAddress(const struct sockaddr* addr, socklen_t len);

  const struct sockaddr* addr() const override {
    return reinterpret_cast<const struct sockaddr*>(&storage_);
  }
  socklen_t addrlen() const override { return len_; }
  int family() const { return storage_.ss_family; }
  bool is_unix() const { return family() == AF_UNIX; }
  std::string str() const;

 private:
  struct sockaddr_storage storage_ {};
  socklen_t len_ = 0;
};

}  // namespace tessera::rpc::guarded_tcp
