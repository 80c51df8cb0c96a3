// A ping-pong over a plain socket between two processes — TCP on loopback
// (default; TCP_NODELAY, as the guarded transport sets) or, with --unix, an
// abstract Unix-domain socket — each message an 8-byte length and its bytes,
// echoed by the other process. No TensorPipe, no Tessera, no event loop.
// Prints p50/p99 round trip of a 4-byte message in µs and the echo bandwidth
// of 64 MiB (2 x size / round trip), as JSON with the tensorpipe_floor's keys.
//
// By default each side blocks in recv(): a reference, not a floor — every
// message pays a sleep and a wake-up, which Tessera's transport avoids by
// polling before it sleeps (see Note [Spin, then sleep]), and so beats. With
// --spin both sides poll (recv with MSG_DONTWAIT in a loop): no wake-up at
// all, the least a message on this path can cost — the floor.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/usage.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBig = 64 << 20;
bool spin = false;  // --spin: poll instead of blocking in recv

bool SendAll(int fd, const char* data, size_t length) {
  while (length > 0) {
    const ssize_t n = ::send(fd, data, length, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    length -= static_cast<size_t>(n);
  }
  return true;
}

bool ReceiveAll(int fd, char* data, size_t length) {
  while (length > 0) {
    const ssize_t n = ::recv(fd, data, length, spin ? MSG_DONTWAIT : 0);
    if (n < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return false;
    data += n;
    length -= static_cast<size_t>(n);
  }
  return true;
}

// One message: its length, then its bytes (as the guarded transport frames).
bool SendMessage(int fd, const char* data, uint64_t length) {
  return SendAll(fd, reinterpret_cast<const char*>(&length), sizeof(length)) &&
         SendAll(fd, data, length);
}

bool ReceiveMessage(int fd, std::vector<char>& buffer, uint64_t* length) {
  if (!ReceiveAll(fd, reinterpret_cast<char*>(length), sizeof(*length))) return false;
  if (*length > buffer.size()) return false;
  return ReceiveAll(fd, buffer.data(), *length);
}

struct Address {
  struct sockaddr_storage storage {};
  socklen_t length = 0;
  int family = AF_INET;
};

Address ListenAddress(bool unix_socket) {
  Address a;
  if (unix_socket) {
    auto* un = reinterpret_cast<struct sockaddr_un*>(&a.storage);
    un->sun_family = AF_UNIX;
    const std::string name = "tessera_socket_floor_" + std::to_string(getpid());
    std::memcpy(un->sun_path + 1, name.data(), name.size());
    a.length = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
    a.family = AF_UNIX;
  } else {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&a.storage);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.length = sizeof(*in);
  }
  return a;
}

void NoDelay(int fd, const Address& a) {
  const int one = 1;
  if (a.family == AF_INET) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

constexpr char kUsage[] =
    "usage: socket_floor [--unix] [--spin]\n"
    "A ping-pong over a plain socket between two processes (TCP on loopback, or an abstract\n"
    "Unix socket), each side blocking in recv (a reference) or, with --spin, polling (the\n"
    "floor under the TensorPipe backend's transports); prints JSON.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  bool unix_socket = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--unix") == 0) unix_socket = true;
    if (std::strcmp(argv[i], "--spin") == 0) spin = true;
  }
  Address address = ListenAddress(unix_socket);
  const int listener = ::socket(address.family, SOCK_STREAM, 0);
  if (listener < 0 ||
      ::bind(listener, reinterpret_cast<struct sockaddr*>(&address.storage), address.length) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<struct sockaddr*>(&address.storage),
                    &address.length) != 0) {
    std::perror("listen");
    return 1;
  }
  const pid_t child = fork();
  if (child == 0) {  // the echo side
    const int fd = ::accept(listener, nullptr, nullptr);
    NoDelay(fd, address);
    std::vector<char> buffer(kBig);
    uint64_t length = 0;
    while (ReceiveMessage(fd, buffer, &length) && SendMessage(fd, buffer.data(), length)) {
    }
    _exit(0);
  }
  ::close(listener);
  const int fd = ::socket(address.family, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<struct sockaddr*>(&address.storage), address.length) != 0) {
    std::perror("connect");
    return 1;
  }
  NoDelay(fd, address);
  std::vector<char> big(kBig, 1), back(kBig);
  auto echo = [&](size_t length) {
    uint64_t got = 0;
    if (!SendMessage(fd, big.data(), length) || !ReceiveMessage(fd, back, &got) || got != length) {
      std::fprintf(stderr, "echo of %zu bytes failed\n", length);
      std::exit(1);
    }
  };
  std::vector<double> rtts;
  for (int i = 0; i < 5500; ++i) {
    const auto start = Clock::now();
    echo(sizeof(float));
    if (i >= 500) {
      rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  echo(kBig);
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) echo(kBig);
  const double gbps =
      2.0 * kBig * 20 / std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
  std::sort(rtts.begin(), rtts.end());
  std::printf("{\"floor_rtt_p50_us\": %.1f, \"floor_rtt_p99_us\": %.1f, "
              "\"floor_gbps_64mb\": %.2f}\n",
              rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100], gbps);
  ::close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  return 0;
}
