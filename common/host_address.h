// HostAddress: the one rule by which every layer that listens or dials (the
// RPC agents, the rendezvous store, Gloo, NCCL) picks this host's address.
//
// Note [Choosing the host address]
// A job spans machines, so a worker must listen on, and tell the others, an
// address they can reach. The rule, first match wins:
//   1. an explicit address (TESSERA_ADDRESS, or AddressOptions::address):
//      listened on as given — a wildcard (0.0.0.0, ::) listens everywhere and
//      advertises what rule 3 finds;
//   2. an interface (TESSERA_SOCKET_IFNAME; GLOO_SOCKET_IFNAME for Gloo and
//      TP_SOCKET_IFNAME for TensorPipe, as PyTorch users set them): its
//      address, of MASTER_ADDR's family when it has both;
//   3. otherwise the source address of the route to MASTER_ADDR (the kernel's
//      own choice, found by connecting a UDP socket, which sends nothing) —
//      loopback when MASTER_ADDR is loopback, the cluster interface's address
//      when it is another machine, the machine's own address when it is this
//      one.
// The advertised address is the one listened on, unless TESSERA_ADVERTISE_ADDRESS
// (AddressOptions::advertise) says otherwise: a worker behind NAT or in a
// container advertises what the others must dial. Host names are resolved
// here, once; IPv6 works as IPv4 does (written in brackets in host:port).
//
// A loopback address is refused when MASTER_ADDR is on another host: that
// worker would advertise an address no one else can dial, and the job would
// otherwise find out only when its first call, minutes later, fails.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

struct AddressOptions {
  std::string interface;  // an interface name, e.g. "eth0"
  std::string address;    // listen on this (numeric, a host name, or a wildcard)
  std::string advertise;  // advertise this instead of what is listened on
  // Where each setting came from, for messages ("TESSERA_SOCKET_IFNAME").
  std::string interface_source = "AddressOptions::interface";
  std::string address_source = "AddressOptions::address";

  bool empty() const { return interface.empty() && address.empty() && advertise.empty(); }

  // TESSERA_ADDRESS, TESSERA_ADVERTISE_ADDRESS and the interface from
  // `layer_ifname_variable` (e.g. "GLOO_SOCKET_IFNAME"; may be null) or else
  // TESSERA_SOCKET_IFNAME.
  static AddressOptions FromEnv(const char* layer_ifname_variable = nullptr);
  // `options`, with each setting it leaves empty taken from `fallback`.
  static AddressOptions Merge(const AddressOptions& options, const AddressOptions& fallback);
};

struct HostAddress {
  std::string bind;       // numeric; may be a wildcard
  std::string advertise;  // what peers dial: numeric, or a name given as such
  std::string interface;  // of `advertise`, when it is this host's ("" if not)
  std::string reason;     // how it was chosen, for logs and errors

  // "10.0.0.2 (eth0, the route to MASTER_ADDR 10.0.0.1)".
  std::string Describe() const;
};

// Applies the address rule (see Note [Choosing the host address]) for a job whose store is at
// `master_addr`. Errors name the setting to change.
absl::StatusOr<HostAddress> ChooseHostAddress(const std::string& master_addr,
                                              const AddressOptions& options);

// Where the rendezvous store listens so that it is reached at MASTER_ADDR:
// that address when it is this host's (loopback included), else the
// wildcard of its family — MASTER_ADDR is then a name or address that
// leads here through NAT or a virtual IP (a Kubernetes service).
absl::StatusOr<std::string> StoreListenHost(const std::string& master_addr);

// "host:port", with an IPv6 host in brackets.
std::string JoinHostPort(const std::string& host, int port);
// Splits "host:port" or "[v6]:port", after any "scheme://" (a worker's
// address, "tcp://10.0.0.1:4000"); false when malformed.
bool SplitHostPort(const std::string& host_port, std::string* host, int* port);

// Whether `address` (numeric) is 127.0.0.0/8 or ::1.
bool IsLoopbackAddress(const std::string& address);
// Whether `address` (numeric) is 0.0.0.0 or ::.
bool IsWildcardAddress(const std::string& address);
// Resolves a host name or numeric address to numeric addresses, IPv4 first.
absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host);
// "lo 127.0.0.1, eth0 10.0.0.2, eth0 fd00::2": for messages.
std::string DescribeInterfaces();

}  // namespace tessera
