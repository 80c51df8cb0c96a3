// An IPv4/IPv6 socket address, parsed from and printed as "host:port"
// ("[v6]:port" for IPv6).
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class InetSockaddr final : public tensorpipe::Sockaddr {
 public:
  static std::optional<InetSockaddr> Parse(const std::string& host_port);
  InetSockaddr(const struct sockaddr* addr, socklen_t len);

  const struct sockaddr* addr() const override {
    return reinterpret_cast<const struct sockaddr*>(&storage_);
  }
  socklen_t addrlen() const override { return len_; }
  int family() const { return storage_.ss_family; }
  std::string str() const;

 private:
  struct sockaddr_storage storage_ {};
  socklen_t len_ = 0;
};

}  // namespace tessera::rpc::guarded_tcp
