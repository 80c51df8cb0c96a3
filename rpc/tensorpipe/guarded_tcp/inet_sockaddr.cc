#include "rpc/tensorpipe/guarded_tcp/inet_sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/numbers.h"

namespace tessera::rpc::guarded_tcp {

std::optional<InetSockaddr> InetSockaddr::Parse(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = host_port.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return std::nullopt;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    struct sockaddr_in6 in6 {};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &in6.sin6_addr) != 1) {
      return std::nullopt;
    }
    return InetSockaddr(reinterpret_cast<struct sockaddr*>(&in6), sizeof(in6));
  }
  struct sockaddr_in in4 {};
  in4.sin_family = AF_INET;
  in4.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &in4.sin_addr) != 1) return std::nullopt;
  return InetSockaddr(reinterpret_cast<struct sockaddr*>(&in4), sizeof(in4));
}

InetSockaddr::InetSockaddr(const struct sockaddr* addr, socklen_t len) : len_(len) {
  std::memcpy(&storage_, addr, std::min<size_t>(len, sizeof(storage_)));
}

std::string InetSockaddr::str() const {
  char buffer[INET6_ADDRSTRLEN] = {0};
  if (storage_.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(&storage_);
    inet_ntop(AF_INET6, &in6->sin6_addr, buffer, sizeof(buffer));
    return "[" + std::string(buffer) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  const auto* in4 = reinterpret_cast<const struct sockaddr_in*>(&storage_);
  inet_ntop(AF_INET, &in4->sin_addr, buffer, sizeof(buffer));
  return std::string(buffer) + ":" + std::to_string(ntohs(in4->sin_port));
}

}  // namespace tessera::rpc::guarded_tcp
