#include "common/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tessera {
namespace {

bool IsIpv6(const std::string& address) { return address.find(':') != std::string::npos; }

std::string Unbracket(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// The numeric host of an IPv4 or IPv6 socket address; "" for other families.
std::string NumericHost(const sockaddr* address) {
  char buffer[INET6_ADDRSTRLEN] = {};
  if (address == nullptr) return "";
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, buffer,
              sizeof(buffer));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, buffer,
              sizeof(buffer));
  }
  return buffer;
}

// IPv6 link-local addresses need a scope to be dialled: never chosen.
bool IsLinkLocal(const sockaddr* address) {
  return address->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
}

struct InterfaceAddress {
  std::string name;
  std::string address;
};

std::vector<InterfaceAddress> ListInterfaceAddresses() {
  std::vector<InterfaceAddress> result;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return result;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    const std::string numeric = NumericHost(entry->ifa_addr);
    if (!numeric.empty() && !IsLinkLocal(entry->ifa_addr)) {
      result.push_back({entry->ifa_name, numeric});
    }
  }
  freeifaddrs(list);
  return result;
}

std::vector<std::string> InterfaceNames() {
  std::vector<std::string> names;
  if (struct if_nameindex* list = ::if_nameindex()) {
    for (struct if_nameindex* entry = list; entry->if_index != 0; ++entry) names.push_back(entry->if_name);
    if_freenameindex(list);
  }
  return names;
}

// The interface carrying `address` on this host ("" if none does).
std::string InterfaceOf(const std::string& address) {
  for (const auto& entry : ListInterfaceAddresses()) {
    if (entry.address == address) return entry.name;
  }
  return "";
}

// The source address the kernel would use to reach `destination`.
absl::StatusOr<std::string> RouteSource(const std::string& destination) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const int family = IsIpv6(destination) ? AF_INET6 : AF_INET;
  if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(9);
    inet_pton(AF_INET6, destination.c_str(), &in6->sin6_addr);
    length = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&storage);
    in4->sin_family = AF_INET;
    in4->sin_port = htons(9);
    inet_pton(AF_INET, destination.c_str(), &in4->sin_addr);
    length = sizeof(sockaddr_in);
  }
  const int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  // A UDP connect only picks the route; nothing is sent.
  if (connect(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(std::strerror(error));
  }
  sockaddr_storage local{};
  socklen_t local_length = sizeof(local);
  const int got = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length);
  close(fd);
  if (got != 0) return absl::InternalError(absl::StrCat("getsockname: ", std::strerror(errno)));
  return NumericHost(reinterpret_cast<const sockaddr*>(&local));
}

// Rule 2: the address of interface `name`, of `family` when it has one.
absl::StatusOr<std::string> InterfaceAddressFor(const std::string& name, const std::string& source,
                                                int family) {
  std::vector<std::string> addresses;
  for (const auto& entry : ListInterfaceAddresses()) {
    if (entry.name == name) addresses.push_back(entry.address);
  }
  if (addresses.empty()) {
    const auto names = InterfaceNames();
    const bool exists = std::find(names.begin(), names.end(), name) != names.end();
    return absl::InvalidArgumentError(absl::StrCat(
        "interface '", name, "' (", source, ") ",
        exists ? "has no IPv4 or global IPv6 address" : "does not exist on this host",
        "; this host has: ", DescribeInterfaces()));
  }
  for (const auto& address : addresses) {
    if ((family == AF_INET6) == IsIpv6(address)) return address;
  }
  return addresses.front();
}

bool IsLocalAddress(const std::string& address) { return !InterfaceOf(address).empty(); }

// Rule 3, also the advertised address of a wildcard listener: the source
// address of the route to the master (`master_text` names it in errors).
absl::StatusOr<HostAddress> ByRoute(const std::string& master, const std::string& master_text) {
  HostAddress routed;
  if (IsLoopbackAddress(master)) {
    routed.bind = routed.advertise = master;
    routed.reason = absl::StrCat("MASTER_ADDR ", master_text, " is loopback");
  } else {
    auto source = RouteSource(master);
    if (!source.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "no route from this host to MASTER_ADDR ", master_text, ": ", source.status().message(),
          "; set TESSERA_SOCKET_IFNAME or TESSERA_ADDRESS (this host has: ", DescribeInterfaces(),
          ")"));
    }
    routed.bind = routed.advertise = *source;
    routed.reason = absl::StrCat("the route to MASTER_ADDR ", master_text);
  }
  routed.interface = InterfaceOf(routed.advertise);
  return routed;
}

}  // namespace

AddressOptions AddressOptions::FromEnv(const char* layer_ifname_variable) {
  AddressOptions options;
  auto read = [](const char* name) -> std::string {
    const char* value = name == nullptr ? nullptr : std::getenv(name);
    return value == nullptr ? "" : value;
  };
  if (std::string layer = read(layer_ifname_variable); !layer.empty()) {
    options.interface = layer;
    options.interface_source = layer_ifname_variable;
  } else if (std::string common = read("TESSERA_SOCKET_IFNAME"); !common.empty()) {
    options.interface = common;
    options.interface_source = "TESSERA_SOCKET_IFNAME";
  }
  options.address = read("TESSERA_ADDRESS");
  options.address_source = "TESSERA_ADDRESS";
  options.advertise = read("TESSERA_ADVERTISE_ADDRESS");
  return options;
}

AddressOptions AddressOptions::Merge(const AddressOptions& options,
                                     const AddressOptions& fallback) {
  AddressOptions merged = options;
  if (merged.interface.empty()) {
    merged.interface = fallback.interface;
    merged.interface_source = fallback.interface_source;
  }
  if (merged.address.empty()) {
    merged.address = fallback.address;
    merged.address_source = fallback.address_source;
  }
  if (merged.advertise.empty()) merged.advertise = fallback.advertise;
  return merged;
}

std::string HostAddress::Describe() const {
  std::string where = interface.empty() ? reason : absl::StrCat(interface, ", ", reason);
  std::string text = absl::StrCat(advertise, " (", where, ")");
  if (bind != advertise) absl::StrAppend(&text, ", listening on ", bind);
  return text;
}

absl::StatusOr<HostAddress> ChooseHostAddress(const std::string& master_addr,
                                              const AddressOptions& options) {
  auto masters = ResolveHost(master_addr);
  if (!masters.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve MASTER_ADDR '", master_addr,
                                                   "': ", masters.status().message()));
  }
  const std::string master = masters->front();
  const int family = IsIpv6(master) ? AF_INET6 : AF_INET;
  const std::string master_text =
      master == Unbracket(master_addr) ? master : absl::StrCat(master_addr, " (", master, ")");

  auto by_route = [&] { return ByRoute(master, master_text); };

  HostAddress chosen;
  if (!options.address.empty()) {
    auto resolved = ResolveHost(options.address);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", options.address_source,
                                                     "='", options.address,
                                                     "': ", resolved.status().message()));
    }
    const std::string bind = resolved->front();
    if (IsWildcardAddress(bind)) {
      TESSERA_ASSIGN_OR_RETURN(auto routed, by_route());
      chosen = routed;
      chosen.bind = bind;
    } else {
      chosen.bind = chosen.advertise = bind;
      chosen.interface = InterfaceOf(bind);
      chosen.reason = absl::StrCat(options.address_source, "=", options.address);
    }
  } else if (!options.interface.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        auto address, InterfaceAddressFor(options.interface, options.interface_source, family));
    chosen.bind = chosen.advertise = address;
    chosen.interface = options.interface;
    chosen.reason = options.interface_source;
  } else {
    TESSERA_ASSIGN_OR_RETURN(auto routed, by_route());
    chosen = routed;
  }
  if (!options.advertise.empty()) {
    auto advertised = ResolveHost(options.advertise);
    if (!advertised.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot resolve TESSERA_ADVERTISE_ADDRESS='",
                                                     options.advertise,
                                                     "': ", advertised.status().message()));
    }
    chosen.advertise = advertised->front();
    chosen.interface = InterfaceOf(chosen.advertise);
    absl::StrAppend(&chosen.reason, ", advertised as set by TESSERA_ADVERTISE_ADDRESS");
  }
  if (IsLoopbackAddress(chosen.advertise) && !IsLoopbackAddress(master) &&
      !IsLocalAddress(master)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker would advertise the loopback address ", chosen.Describe(),
        ", but MASTER_ADDR ", master_text,
        " is another host, whose workers cannot dial it; set TESSERA_SOCKET_IFNAME to an "
        "interface they can reach, or TESSERA_ADDRESS (this host has: ",
        DescribeInterfaces(), ")"));
  }
  return chosen;
}

absl::StatusOr<std::string> StoreListenHost(const std::string& master_addr) {
  auto masters = ResolveHost(master_addr);
  if (!masters.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve MASTER_ADDR '", master_addr,
                                                   "': ", masters.status().message()));
  }
  for (const auto& master : *masters) {
    if (IsLoopbackAddress(master) || IsLocalAddress(master)) return master;
  }
  return std::string(IsIpv6(masters->front()) ? "::" : "0.0.0.0");
}

std::string JoinHostPort(const std::string& host, int port) {
  if (IsIpv6(host) && host.front() != '[') return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const auto scheme = address.find("://");
  const std::string host_port = scheme == std::string::npos ? address : address.substr(scheme + 3);
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = Unbracket(host_port.substr(0, colon));
  return absl::SimpleAtoi(host_port.substr(colon + 1), port);
}

bool IsLoopbackAddress(const std::string& address) {
  const std::string bare = Unbracket(address);
  in_addr v4{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

bool IsWildcardAddress(const std::string& address) {
  const std::string bare = Unbracket(address);
  in_addr v4{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) return v4.s_addr == htonl(INADDR_ANY);
  in6_addr v6{};
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&v6);
  return false;
}

absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host) {
  const std::string bare = Unbracket(host);
  if (bare.empty()) return absl::InvalidArgumentError("empty host name");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int error = getaddrinfo(bare.c_str(), nullptr, &hints, &list);
  if (error != 0) return absl::NotFoundError(gai_strerror(error));
  std::vector<std::string> v4, v6;
  for (addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
    const std::string numeric = NumericHost(entry->ai_addr);
    if (!numeric.empty()) (entry->ai_family == AF_INET ? v4 : v6).push_back(numeric);
  }
  freeaddrinfo(list);
  std::vector<std::string> all;
  for (auto* group : {&v4, &v6}) {
    for (const auto& address : *group) {
      if (std::find(all.begin(), all.end(), address) == all.end()) all.push_back(address);
    }
  }
  if (all.empty()) return absl::NotFoundError("no IPv4 or IPv6 address");
  return all;
}

std::string DescribeInterfaces() {
  std::vector<std::string> parts;
  for (const auto& entry : ListInterfaceAddresses()) {
    parts.push_back(absl::StrCat(entry.name, " ", entry.address));
  }
  return parts.empty() ? "no addresses" : absl::StrJoin(parts, ", ");
}

}  // namespace tessera
