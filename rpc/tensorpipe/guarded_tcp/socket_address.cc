#include "rpc/tensorpipe/guarded_tcp/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

#include "absl/strings/numbers.h"

namespace tessera::rpc::guarded_tcp {
namespace {

std::optional<SocketAddress> ParseAbstractUnix(const std::string& name) {
  struct sockaddr_un un {};
  un.sun_family = AF_UNIX;
  // sun_path[0] stays '\0': the abstract namespace; the name follows,
  // without a terminator (its length is the address length).
  if (name.empty() || name.size() > sizeof(un.sun_path) - 1) return std::nullopt;
  std::memcpy(un.sun_path + 1, name.data(), name.size());
  return SocketAddress(reinterpret_cast<struct sockaddr*>(&un),
                       static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 +
                                              name.size()));
}

}  // namespace

std::optional<SocketAddress> SocketAddress::Parse(const std::string& text) {
  if (!text.empty() && text.front() == '@') return ParseAbstractUnix(text.substr(1));
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = text.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return std::nullopt;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    struct sockaddr_in6 in6 {};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &in6.sin6_addr) != 1) {
      return std::nullopt;
    }
    return SocketAddress(reinterpret_cast<struct sockaddr*>(&in6), sizeof(in6));
  }
  struct sockaddr_in in4 {};
  in4.sin_family = AF_INET;
  in4.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &in4.sin_addr) != 1) return std::nullopt;
  return SocketAddress(reinterpret_cast<struct sockaddr*>(&in4), sizeof(in4));
}

SocketAddress::SocketAddress(const struct sockaddr* addr, socklen_t len)
    : len_(std::min<socklen_t>(len, sizeof(storage_))) {
  std::memcpy(&storage_, addr, len_);
}

std::string SocketAddress::str() const {
  if (storage_.ss_family == AF_UNIX) {
    const auto* un = reinterpret_cast<const struct sockaddr_un*>(&storage_);
    const size_t path_bytes = len_ > offsetof(struct sockaddr_un, sun_path)
                                  ? len_ - offsetof(struct sockaddr_un, sun_path)
                                  : 0;
    if (path_bytes == 0) return "@?";  // an unbound (client) socket
    if (un->sun_path[0] != '\0') return std::string(un->sun_path, strnlen(un->sun_path, path_bytes));
    return "@" + std::string(un->sun_path + 1, path_bytes - 1);
  }
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
