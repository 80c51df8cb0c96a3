#include "rpc/tensorpipe/fd_inbox.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tessera::rpc {
namespace {

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// The address of an abstract socket named `name`, and its length.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  const size_t length = std::min(name.size(), sizeof(address->sun_path) - 1);
  std::memcpy(address->sun_path + 1, name.data(), length);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

constexpr size_t kTicketBytes = sizeof(uint64_t);

}  // namespace

absl::StatusOr<std::unique_ptr<FdInbox>> FdInbox::Open() {
  uint64_t random[3];
  if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    return absl::InternalError(Errno("getrandom for a descriptor inbox"));
  }
  const std::string name = "tessera-fdbox-" + absl::BytesToHexString(absl::string_view(
                                                  reinterpret_cast<const char*>(random), 16));
  const int socket = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (socket < 0) return absl::UnavailableError(Errno("descriptor inbox: socket"));
  const int on = 1;
  sockaddr_un address;
  const socklen_t length = AbstractAddress(name, &address);
  if (::setsockopt(socket, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0 ||
      ::bind(socket, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const std::string why = Errno("descriptor inbox: bind");
    ::close(socket);
    return absl::UnavailableError(why);
  }
  const int post_socket = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const timeval wait = absl::ToTimeval(kPostWait);
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (post_socket < 0 || wake < 0 ||
      ::setsockopt(post_socket, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait)) != 0) {
    const std::string why = Errno("descriptor inbox: post socket or eventfd");
    ::close(socket);
    if (post_socket >= 0) ::close(post_socket);
    if (wake >= 0) ::close(wake);
    return absl::UnavailableError(why);
  }
  return std::unique_ptr<FdInbox>(new FdInbox(socket, post_socket, wake, name, random[2]));
}

FdInbox::FdInbox(int socket, int post_socket, int wake, std::string name, uint64_t first_ticket)
    : socket_(socket),
      post_socket_(post_socket),
      wake_(wake),
      name_(std::move(name)),
      next_ticket_(first_ticket) {
  thread_ = std::thread([this] { Run(); });
}

FdInbox::~FdInbox() {
  const uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof(one));
  thread_.join();
  MutexLock lock(&mu_);
  for (const auto& [ticket, entry] : unclaimed_) ::close(entry.fd);
  ::close(socket_);
  ::close(post_socket_);
  ::close(wake_);
}

uint64_t FdInbox::NewTicket() { return next_ticket_.fetch_add(1, std::memory_order_relaxed); }

void FdInbox::Run() {
  while (true) {
    pollfd fds[2] = {{socket_, POLLIN, 0}, {wake_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    // An error on the socket would wake every poll at once: rather than
    // spin, stop here and leave the draining to Take.
    if ((fds[0].revents & (POLLERR | POLLNVAL)) != 0) return;
    if (fds[0].revents != 0) {
      MutexLock lock(&mu_);
      DrainLocked();
    }
  }
}

absl::Status FdInbox::Post(const std::string& peer, const std::vector<uint64_t>& tickets,
                           const std::vector<int>& fds) {
  if (fds.empty() || fds.size() != tickets.size() || fds.size() > kMaxFdsPerPost) {
    return absl::InvalidArgumentError(
        absl::StrCat("a post carries 1 to ", kMaxFdsPerPost, " descriptors, one per ticket"));
  }
  std::vector<char> payload(tickets.size() * kTicketBytes);
  std::memcpy(payload.data(), tickets.data(), payload.size());
  iovec iov{payload.data(), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
  msghdr message{};
  sockaddr_un address;
  message.msg_name = &address;
  message.msg_namelen = AbstractAddress(peer, &address);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  if (::sendmsg(post_socket_, &message, MSG_NOSIGNAL) < 0) {
    return absl::UnavailableError(Errno(("posting descriptors to inbox " + peer).c_str()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FdInbox::Take(uint64_t ticket) {
  MutexLock lock(&mu_);
  DrainLocked();
  auto it = unclaimed_.find(ticket);
  if (it == unclaimed_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no shared-memory descriptor was posted under ticket ", ticket,
                     " (its sender posts it before it writes the frame, so it will not come)"));
  }
  const int fd = it->second.fd;
  unclaimed_.erase(it);
  return fd;
}

size_t FdInbox::unclaimed() const {
  MutexLock lock(&mu_);
  return unclaimed_.size();
}

void FdInbox::DrainLocked() {
  while (ReceiveOneLocked()) {
  }
  const absl::Time now = absl::Now();
  for (auto it = unclaimed_.begin(); it != unclaimed_.end();) {
    if (now - it->second.arrived > kUnclaimedLifetime) {
      ::close(it->second.fd);
      it = unclaimed_.erase(it);
    } else {
      ++it;
    }
  }
  // Bounded: a flood (from this user; nobody else gets in) costs the
  // flooder's own descriptors, oldest first.
  while (unclaimed_.size() > kMaxUnclaimed) {
    auto oldest = unclaimed_.begin();
    for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it) {
      if (it->second.arrived < oldest->second.arrived) oldest = it;
    }
    ::close(oldest->second.fd);
    unclaimed_.erase(oldest);
  }
}

bool FdInbox::ReceiveOneLocked() {
  char payload[kMaxFdsPerPost * kTicketBytes + 1];
  alignas(
      cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerPost) + CMSG_SPACE(sizeof(ucred))];
  iovec iov{payload, sizeof(payload)};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(socket_, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EINTR;
  std::vector<int> fds;
  const ucred* sender = nullptr;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET) continue;
    if (header->cmsg_type == SCM_RIGHTS) {
      const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const size_t first = fds.size();
      fds.resize(first + count);
      std::memcpy(fds.data() + first, CMSG_DATA(header), count * sizeof(int));
    } else if (header->cmsg_type == SCM_CREDENTIALS) {
      sender = reinterpret_cast<const ucred*>(CMSG_DATA(header));
    }
  }
  const size_t tickets = static_cast<size_t>(n) / kTicketBytes;
  const bool well_formed = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 &&
                           sender != nullptr && sender->uid == ::geteuid() &&
                           static_cast<size_t>(n) % kTicketBytes == 0 && tickets == fds.size();
  if (!well_formed) {
    for (int fd : fds) ::close(fd);
    return true;
  }
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < tickets; ++i) {
    uint64_t ticket;
    std::memcpy(&ticket, payload + i * kTicketBytes, kTicketBytes);
    // A ticket already here keeps its first descriptor.
    if (!unclaimed_.emplace(ticket, Unclaimed{fds[i], now}).second) ::close(fds[i]);
  }
  return true;
}

}  // namespace tessera::rpc
