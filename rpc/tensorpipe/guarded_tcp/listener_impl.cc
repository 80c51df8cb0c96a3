#include "rpc/tensorpipe/guarded_tcp/listener_impl.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "rpc/tensorpipe/guarded_tcp/connection_impl.h"
#include "rpc/tensorpipe/guarded_tcp/context_impl.h"
#include "rpc/tensorpipe/guarded_tcp/frame_error.h"
#include "rpc/tensorpipe/guarded_tcp/hello_frame.h"

namespace tessera::rpc::guarded_tcp {
namespace {

// Forwards a pending connection's socket events to its listener.
class HelloGate final : public tensorpipe::EpollLoop::EventHandler {
 public:
  HelloGate(std::weak_ptr<ListenerImpl> listener, int fd)
      : listener_(std::move(listener)), fd_(fd) {}
  void handleEventsFromLoop(int events) override {
    if (auto listener = listener_.lock()) listener->OnHelloEvent(fd_, events);
  }

 private:
  std::weak_ptr<ListenerImpl> listener_;
  const int fd_;
};

// What a rate-limited line adds about the lines it stands for.
std::string MoreSince(int64_t held_back) {
  return held_back > 0 ? " (and " + std::to_string(held_back) +
                             " more connections since the last such line)"
                       : "";
}

// Who is at the other end: its address, or for a Unix-domain socket (whose
// client end has no name) the process and user the kernel vouches for.
std::string PeerOf(int fd) {
  struct sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&addr), &len) != 0) return "?";
  if (addr.ss_family == AF_UNIX) {
    struct ucred cred {};
    socklen_t cred_len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) return "a local process";
    return "local pid " + std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")";
  }
  return SocketAddress(reinterpret_cast<struct sockaddr*>(&addr), len).str();
}

}  // namespace

ListenerImpl::ListenerImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
                           std::string id, std::string addr)
    : ListenerImplBoilerplate(token, std::move(context), std::move(id)),
      requested_addr_(std::move(addr)) {}

void ListenerImpl::initImplFromLoop() {
  context_->enroll(*this);
  sockaddr_ = SocketAddress::Parse(requested_addr_);
  if (!sockaddr_.has_value()) {
    setError(MakeFrameError("cannot parse listen address '" + requested_addr_ + "'",
                            __FILE__, __LINE__));
    return;
  }
  if (sockaddr_->is_unix() != context_->unix_domain()) {
    setError(MakeFrameError("'" + requested_addr_ + "' is not a " +
                                (context_->unix_domain() ? "Unix-domain (@name)" : "TCP") +
                                " address",
                            __FILE__, __LINE__));
    return;
  }
  tensorpipe::Error error;
  std::tie(error, socket_) = tensorpipe::Socket::createForFamily(sockaddr_->family());
  if (!error && !sockaddr_->is_unix()) error = socket_.reuseAddr(true);
  if (!error) error = socket_.bind(*sockaddr_);
  if (!error) error = socket_.block(false);
  // Note [Connection storms]: a job's workers all dial at start; the kernel
  // caps the backlog at net.core.somaxconn (4096 on Debian 12).
  if (!error) error = socket_.listen(SOMAXCONN);
  if (error) {
    setError(std::move(error));
    return;
  }
  struct sockaddr_storage bound;
  socklen_t length;
  std::tie(error, bound, length) = socket_.getSockName();
  if (error) {
    setError(std::move(error));
    return;
  }
  sockaddr_ = SocketAddress(reinterpret_cast<struct sockaddr*>(&bound), length);
}

void ListenerImpl::acceptImplFromLoop(accept_callback_fn fn) {
  if (!ready_.empty()) {
    tensorpipe::Socket socket = std::move(ready_.front());
    ready_.pop_front();
    fn(tensorpipe::Error::kSuccess, createAndInitConnection(std::move(socket)));
    return;
  }
  fns_.push_back(std::move(fn));
  if (!listening_registered_) {
    context_->registerDescriptor(socket_.fd(), EPOLLIN, shared_from_this());
    listening_registered_ = true;
  }
}

void ListenerImpl::Deliver(tensorpipe::Socket socket) {
  if (fns_.empty()) {
    ready_.push_back(std::move(socket));
    return;
  }
  auto fn = std::move(fns_.front());
  fns_.pop_front();
  fn(tensorpipe::Error::kSuccess, createAndInitConnection(std::move(socket)));
}

void ListenerImpl::Drop(int fd, const std::string& why, bool routine) {
  if (int64_t held_back = 0; drops_logged_.Allow(&held_back)) {
    const std::string line = "listener " + addrImplFromLoop() + ": closing connection from " +
                             PeerOf(fd) + ": " + why + MoreSince(held_back);
    if (routine) {
      TESSERA_LOG(INFO) << line;
    } else {
      TESSERA_LOG(WARNING) << line;
    }
  }
  context_->unregisterDescriptor(fd);
  pending_.erase(fd);  // closes the socket
}

void ListenerImpl::DropStaleHellos() {
  const absl::Time cutoff = absl::Now() - kHelloTimeout;
  std::vector<int> stale;
  for (const auto& [fd, hello] : pending_) {
    if (hello.since < cutoff) stale.push_back(fd);
  }
  for (int fd : stale) Drop(fd, "no hello within " + absl::FormatDuration(kHelloTimeout));
}

// Note [Full gate]: at most kMaxPendingHellos connections may wait at the
// gate without having proved the secret; a new one finding that many makes
// room by closing one of them instead of being refused. Refusing the newest
// let anyone who holds silent connections open (a flood, a port scanner)
// lock every worker out of this one: a graceful shutdown's liveness probe,
// opened during such a flood, was refused and took it for a dead worker
// (hostile_traffic_test). Which one goes:
//  1. the longest-waiting that has not completed its greeting — a silent or
//     slow stranger, or a peer whose greeting this busy loop has not read
//     yet: the connecting side has had no challenge, so it dials again
//     unnoticed (see Note [Connect again], connect_retry.h);
//  2. otherwise the longest-waiting that was challenged and has not proved
//     the secret — after reading what it sent meanwhile, since a job's
//     connection storm on a busy host leaves proofs unread (128 workers
//     dial each worker ~380 times at once).
// A connection that proved the secret is the job's own: it is never closed
// for room, and does not count (it waits only for its hello frame, bounded
// by kHelloTimeout).
void ListenerImpl::MakeRoomAtTheGate() {
  std::vector<std::pair<absl::Time, int>> greeting, challenged;
  for (const auto& [fd, pending] : pending_) {
    if (pending.stage == Stage::kGreeting) greeting.emplace_back(pending.since, fd);
    if (pending.stage == Stage::kProof) challenged.emplace_back(pending.since, fd);
  }
  if (greeting.size() + challenged.size() < kMaxPendingHellos) return;
  const absl::Time now = absl::Now();
  // Routine in a job's connection storm, so not a warning: the peers dial
  // again.
  auto drop = [&](const std::pair<absl::Time, int>& oldest, const char* what) {
    Drop(oldest.second,
         std::to_string(kMaxPendingHellos) + " connections await the gate; closing " + what +
             " (waiting " + absl::FormatDuration(now - oldest.first) + ")",
         /*routine=*/true);
  };
  if (!greeting.empty()) {
    drop(*std::min_element(greeting.begin(), greeting.end()),
         "the longest-waiting without a greeting");
    return;
  }
  std::sort(challenged.begin(), challenged.end());
  for (const auto& candidate : challenged) {
    OnHelloEvent(candidate.second, 0);  // reads a proof that has arrived
    auto it = pending_.find(candidate.second);
    if (it != pending_.end() && it->second.stage == Stage::kProof) {
      drop(candidate, "the longest-waiting without a proof");
      return;
    }
  }
}

bool ListenerImpl::PassGate(int fd, PendingHello& pending, bool closed) {
  while (pending.stage != Stage::kHello) {
    const size_t wanted = pending.stage == Stage::kGreeting ? kGreetingBytes : kProofBytes;
    char buffer[kGreetingBytes];
    // Never more than the message: what follows the proof is TensorPipe's.
    const ssize_t n = ::recv(fd, buffer, wanted - pending.received.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (closed) Drop(fd, "closed before the transport gate");
      return false;
    }
    if (n <= 0) {
      Drop(fd, n == 0 ? "closed before the transport gate" : std::string("recv: ") + std::strerror(errno));
      return false;
    }
    pending.received.append(buffer, n);
    if (pending.received.size() < wanted) continue;
    if (pending.stage == Stage::kGreeting) {
      auto challenge = pending.gate.OnGreeting(pending.received);
      if (!challenge.ok()) {
        Drop(fd, std::string(challenge.status().message()));
        return false;
      }
      // A fresh socket's buffer takes 64 bytes at once; a peer that does
      // not read them is not a peer.
      if (::send(fd, challenge->data(), challenge->size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(challenge->size())) {
        Drop(fd, "cannot send the transport challenge");
        return false;
      }
      pending.stage = Stage::kProof;
    } else {
      if (auto proof = pending.gate.OnProof(pending.received); !proof.ok()) {
        Drop(fd, std::string(proof.message()));
        return false;
      }
      pending.stage = Stage::kHello;
    }
    pending.received.clear();
  }
  return true;
}

void ListenerImpl::OnHelloEvent(int fd, int events) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  const bool closed = events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP);
  if (!PassGate(fd, it->second, closed)) return;
  std::vector<char> buffer(sizeof(uint64_t) + kMaxHelloBytes);
  const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    Drop(fd, n == 0 ? "closed before its hello" : std::string("recv: ") + std::strerror(errno));
    return;
  }
  std::string why;
  switch (CheckHelloFrame(std::string_view(buffer.data(), n), &why)) {
    case HelloCheck::kInvalid:
      Drop(fd, why);
      return;
    case HelloCheck::kIncomplete:
      if (closed) Drop(fd, "closed before its hello was complete");
      return;  // wait for the rest (edge-triggered: the next arrival wakes us)
    case HelloCheck::kValid:
      break;
  }
  context_->unregisterDescriptor(fd);
  tensorpipe::Socket socket = std::move(it->second.socket);
  pending_.erase(fd);
  Deliver(std::move(socket));
}

std::string ListenerImpl::addrImplFromLoop() const {
  if (!sockaddr_.has_value()) return requested_addr_;
  std::string host;
  int port = 0;
  if (!context_->unix_domain() && !context_->advertise_host().empty() &&
      SplitHostPort(sockaddr_->str(), &host, &port)) {
    return JoinHostPort(context_->advertise_host(), port);
  }
  return sockaddr_->str();
}

void ListenerImpl::handleEventsFromLoop(int events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    setError(MakeFrameError("listening socket failed", __FILE__, __LINE__));
    return;
  }
  DropStaleHellos();
  // See Note [Connection storms]: take every connection the backlog holds, not
  // one per wake-up, so that a burst of dials drains in one pass.
  for (int taken = 0; taken < kMaxAcceptsPerWakeup; ++taken) {
    const int fd = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EAGAIN: the backlog is empty; ECONNABORTED: the peer gave up;
      // EMFILE/ENFILE: out of descriptors for now. None ends the listener.
      return;
    }
    tensorpipe::Socket socket(fd);
    MakeRoomAtTheGate();
    pending_.emplace(fd,
                     PendingHello{std::move(socket), absl::Now(), GateServer(context_->secret())});
    context_->registerDescriptor(
        fd, EPOLLIN | EPOLLRDHUP | EPOLLET,
        std::make_shared<HelloGate>(std::static_pointer_cast<ListenerImpl>(shared_from_this()),
                                    fd));
  }
}

void ListenerImpl::handleErrorImpl() {
  if (listening_registered_ && socket_.hasValue()) {
    context_->unregisterDescriptor(socket_.fd());
    listening_registered_ = false;
  }
  socket_.reset();
  for (auto& [fd, hello] : pending_) context_->unregisterDescriptor(fd);
  pending_.clear();
  ready_.clear();
  for (auto& fn : fns_) fn(error_, std::shared_ptr<tensorpipe::transport::Connection>());
  fns_.clear();
  context_->unenroll(*this);
}

}  // namespace tessera::rpc::guarded_tcp
