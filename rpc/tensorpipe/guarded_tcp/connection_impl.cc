#include "rpc/tensorpipe/guarded_tcp/connection_impl.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "common/metrics.h"
#include "rpc/tensorpipe/guarded_tcp/bounded_nop.h"
#include "rpc/tensorpipe/guarded_tcp/context_impl.h"
#include "rpc/tensorpipe/guarded_tcp/frame_error.h"
#include "rpc/tensorpipe/guarded_tcp/listener_impl.h"

namespace tessera::rpc::guarded_tcp {
namespace {

constexpr size_t kPrefixBytes = sizeof(uint64_t);

tensorpipe::Error SystemErrorAt(const char* syscall, int error, int line) {
  return tensorpipe::Error(std::make_shared<tensorpipe::SystemError>(syscall, error), __FILE__,
                           line);
}

// Note [Silent peers]: a peer whose machine died, or whose link is cut,
// resets nothing: its connections just go quiet, and a worker that only
// answers it (a parameter server) would hold its work for ever. The kernel
// probes an idle connection after kKeepaliveIdleS and gives up after
// kKeepaliveProbes unanswered probes kKeepaliveIntervalS apart; data left
// unacknowledged for kUnackedTimeoutMs fails it too. Either way the pipe
// fails and the runtime marks the peer failed, as if it had been killed —
// about 13 s after it fell silent. A live peer's kernel answers probes
// however busy its process is, so a long computation is not silence.
constexpr int kKeepaliveIdleS = 5;
constexpr int kKeepaliveIntervalS = 2;
constexpr int kKeepaliveProbes = 4;
constexpr unsigned kUnackedTimeoutMs =
    1000 * (kKeepaliveIdleS + kKeepaliveIntervalS * kKeepaliveProbes);

void DetectSilentPeer(int fd) {
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepaliveIdleS, sizeof(kKeepaliveIdleS));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalS, sizeof(kKeepaliveIntervalS));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(kKeepaliveProbes));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUnackedTimeoutMs, sizeof(kUnackedTimeoutMs));
}

// A listener that closed a connection it had not yet engaged with (see Note
// [Connect again]).
bool ClosedByListener(int error) { return error == ECONNRESET || error == EPIPE; }

}  // namespace

// Starts a connection's next attempt when its delay is over (see Note [Connect
// again]).
class RetryTimer final : public tensorpipe::EpollLoop::EventHandler {
 public:
  explicit RetryTimer(std::weak_ptr<ConnectionImpl> connection)
      : connection_(std::move(connection)) {}
  void handleEventsFromLoop(int /*events*/) override {
    if (auto connection = connection_.lock()) connection->OnRetryTimer();
  }

 private:
  std::weak_ptr<ConnectionImpl> connection_;
};

ConnectionImpl::ConnectionImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
                               std::string id, tensorpipe::Socket socket)
    : ConnectionImplBoilerplate(token, std::move(context), std::move(id)),
      retry_(context_->connect_budget()),
      socket_(std::move(socket)) {}

ConnectionImpl::ConnectionImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
                               std::string id, std::string addr)
    : ConnectionImplBoilerplate(token, std::move(context), std::move(id)),
      addr_(std::move(addr)),
      retry_(context_->connect_budget()) {}

void ConnectionImpl::initImplFromLoop() {
  context_->enroll(*this);
  if (!socket_.hasValue()) {
    sockaddr_ = SocketAddress::Parse(addr_);
    if (!sockaddr_.has_value() || sockaddr_->is_unix() != context_->unix_domain()) {
      setError(MakeFrameError("cannot parse address '" + addr_ + "'", __FILE__, __LINE__));
      return;
    }
    Dial();
    return;
  }
  if (tensorpipe::Error error = socket_.block(false)) {
    setError(std::move(error));
    return;
  }
  ConfigureSocket();
  UpdateInterest();
}

void ConnectionImpl::ConfigureSocket() {
  if (context_->unix_domain()) return;  // a same-host peer that dies is closed by the kernel
  // Small control frames must not wait for Nagle's algorithm.
  int one = 1;
  ::setsockopt(socket_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  DetectSilentPeer(socket_.fd());
}

void ConnectionImpl::Dial() {
  retry_.Attempted(absl::Now());
  connecting_ = true;
  gate_.emplace(context_->secret());
  gate_out_ = gate_->greeting();
  gate_in_done_ = 0;
  tensorpipe::Error error;
  std::tie(error, socket_) = tensorpipe::Socket::createForFamily(sockaddr_->family());
  if (!error) error = socket_.block(false);
  if (!error) error = socket_.connect(*sockaddr_);  // EINPROGRESS is not an error
  if (error) {
    const auto system = error.castToType<tensorpipe::SystemError>();
    if (system != nullptr && IsBusyListener(system->errorCode())) {
      DialAgainOrFail(error.what());
    } else {
      setError(std::move(error));
    }
    return;
  }
  ConfigureSocket();
  UpdateInterest();
}

void ConnectionImpl::DialAgainOrFail(const std::string& cause) {
  const absl::Time now = absl::Now();
  if (registered_events_ != 0) {
    context_->unregisterDescriptor(socket_.fd());
    registered_events_ = 0;
  }
  socket_.reset();
  const std::optional<absl::Duration> delay = retry_.NextDelay(now);
  if (!delay.has_value()) {
    setError(MakeFrameError("cannot connect to " + addr_ + ": " + cause + " (gave up after " +
                                retry_.Describe(now) + ")",
                            __FILE__, __LINE__));
    return;
  }
  metrics::RecordConnectRetry();
  if (!retry_timer_.hasValue()) {
    const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) {
      setError(SystemErrorAt("timerfd_create", errno, __LINE__));
      return;
    }
    retry_timer_ = tensorpipe::Fd(fd);
  }
  const int64_t nanos = std::max<int64_t>(1, absl::ToInt64Nanoseconds(*delay));
  struct itimerspec when {};
  when.it_value.tv_sec = nanos / 1'000'000'000;
  when.it_value.tv_nsec = nanos % 1'000'000'000;
  if (::timerfd_settime(retry_timer_.fd(), 0, &when, nullptr) != 0) {
    setError(SystemErrorAt("timerfd_settime", errno, __LINE__));
    return;
  }
  context_->registerDescriptor(retry_timer_.fd(), EPOLLIN,
                               std::make_shared<RetryTimer>(shared_from_this()));
}

void ConnectionImpl::OnRetryTimer() {
  context_->unregisterDescriptor(retry_timer_.fd());
  uint64_t expirations = 0;
  (void)!::read(retry_timer_.fd(), &expirations, sizeof(expirations));
  if (error_) return;
  Dial();
}

void ConnectionImpl::readImplFromLoop(read_callback_fn fn) {
  ReadOp op;
  op.fn = std::move(fn);
  reads_.push_back(std::move(op));
  if (!connecting_ && GateOpen()) ProcessReads();
  if (!error_) UpdateInterest();
}

void ConnectionImpl::readImplFromLoop(void* ptr, size_t length, read_callback_fn fn) {
  ReadOp op;
  op.expected = length;
  op.data = static_cast<char*>(ptr);
  op.fn = std::move(fn);
  reads_.push_back(std::move(op));
  if (!connecting_ && GateOpen()) ProcessReads();
  if (!error_) UpdateInterest();
}

// The boilerplate's version throws on the event loop when a control object
// does not parse, and reads past a truncated one (see Note [Bounded nop reads]);
// here either only fails this connection.
void ConnectionImpl::readImplFromLoop(tensorpipe::AbstractNopHolder& object,
                                      read_nop_callback_fn fn) {
  readImplFromLoop([this, &object, fn = std::move(fn)](const tensorpipe::Error& error,
                                                       const void* ptr, size_t length) {
    if (!error) {
      nop::Status<void> status = ReadNopBounded(object, ptr, length);
      if (status.has_error()) {
        setError(MakeFrameError(
            "malformed control message (" + std::string(status.GetErrorMessage()) + ")", __FILE__,
            __LINE__));
        fn(error_);
        return;
      }
    }
    fn(error);
  });
}

void ConnectionImpl::writeImplFromLoop(const void* ptr, size_t length, write_callback_fn fn) {
  WriteOp op;
  op.length = length;
  op.data = static_cast<const char*>(ptr);
  op.fn = std::move(fn);
  writes_.push_back(std::move(op));
  context_->ExpectAnswer();
  if (!connecting_ && GateOpen()) ProcessWrites();
  if (!error_) UpdateInterest();
}

void ConnectionImpl::handleEventsFromLoop(int events) {
  // Note [Fair reads]: a peer that has sent a burst (a client with 32 calls
  // in flight) is read a few frames at a time, so that its burst does not
  // pass ahead of every other peer's (the batched-serving example's batches
  // then held one client's calls only). TensorPipe posts its next read from
  // the last one's callback, so without a budget one event would drain the
  // socket. A closed peer's frames are all read before its EOF.
  frames_left_in_event_ =
      (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) ? kUnlimitedFrames : kFramesPerEvent;
  if (connecting_) {
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(socket_.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0 || (events & EPOLLERR)) {
      setError(SystemErrorAt("connect", so_error != 0 ? so_error : ECONNREFUSED, __LINE__));
      return;
    }
    connecting_ = false;
  }
  if (!GateOpen() && !PassGate()) {
    if (!error_) UpdateInterest();
    return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) ProcessReads();
  if (error_) return;
  if (events & (EPOLLHUP | EPOLLERR)) {
    // Nothing queued to read, but the peer is gone: fail queued writes too.
    setError(tensorpipe::Error(std::make_shared<tensorpipe::EOFError>(), __FILE__, __LINE__));
    return;
  }
  ProcessWrites();
  if (!error_) UpdateInterest();
}

bool ConnectionImpl::PassGate() {
  while (!GateOpen()) {
    if (!gate_out_.empty()) {
      const ssize_t n = ::send(socket_.fd(), gate_out_.data(), gate_out_.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
        // Before the challenge the listener has not engaged with us yet.
        if (gate_.has_value() && ClosedByListener(errno)) {
          DialAgainOrFail(std::string("send: ") + std::strerror(errno));
        } else {
          setError(SystemErrorAt("send", errno, __LINE__));
        }
        return false;
      }
      gate_out_.erase(0, n);
      if (!gate_out_.empty()) return false;
      continue;
    }
    // Exactly the challenge: what follows it is TensorPipe's.
    const ssize_t n =
        ::recv(socket_.fd(), gate_in_ + gate_in_done_, kChallengeBytes - gate_in_done_, 0);
    if (n == 0 || (n < 0 && ClosedByListener(errno))) {
      DialAgainOrFail(n == 0 ? std::string("closed before the transport gate's challenge")
                             : std::string("recv: ") + std::strerror(errno));
      return false;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        setError(SystemErrorAt("recv", errno, __LINE__));
      }
      return false;
    }
    gate_in_done_ += n;
    if (gate_in_done_ < kChallengeBytes) continue;
    auto proof = gate_->OnChallenge(std::string_view(gate_in_, kChallengeBytes));
    if (!proof.ok()) {
      setError(
          tensorpipe::Error(std::make_shared<GateRefused>(std::string(proof.status().message())),
                            __FILE__, __LINE__));
      return false;
    }
    gate_.reset();
    gate_out_ = *std::move(proof);
  }
  return true;
}

// Note [Read ahead]: reading a frame as its length and then its body took
// two receives per frame, and a message is a frame or more. Now a receive
// takes whatever the socket holds, up to kReadAheadBytes, and the frames
// after the current one wait in the read-ahead: a burst of small messages
// costs one receive, not two per frame. A body at least as large as the
// read-ahead is received straight into its buffer (no second copy). The
// buffer is fixed: a peer's bytes never size an allocation here (see Note
// [Bounded frames]). It is small, and left uninitialised, because a worker
// holds one per connection: 16 KiB ones made 128 workers' all-to-all 25–40%
// slower on two cores (4 MB more per worker), while 2 KiB still holds a
// dozen small calls. Bytes are taken from the read-ahead before the socket is
// read again, so a closed peer's frames are still all read before its EOF.
bool ConnectionImpl::ReceiveInto(char* data, size_t wanted, size_t* done) {
  while (*done < wanted) {
    if (read_ahead_begin_ < read_ahead_end_) {
      const size_t n = std::min(wanted - *done, read_ahead_end_ - read_ahead_begin_);
      std::memcpy(data + *done, read_ahead_.get() + read_ahead_begin_, n);
      read_ahead_begin_ += n;
      *done += n;
      continue;
    }
    read_ahead_begin_ = read_ahead_end_ = 0;
    const size_t missing = wanted - *done;
    const bool direct = missing >= kReadAheadBytes;
    if (!direct && read_ahead_ == nullptr) read_ahead_.reset(new char[kReadAheadBytes]);
    const ssize_t n = direct ? ::recv(socket_.fd(), data + *done, missing, 0)
                             : ::recv(socket_.fd(), read_ahead_.get(), kReadAheadBytes, 0);
    if (n == 0) {
      setError(tensorpipe::Error(std::make_shared<tensorpipe::EOFError>(), __FILE__, __LINE__));
      return false;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        setError(SystemErrorAt("recv", errno, __LINE__));
      }
      return false;
    }
    if (direct) {
      *done += n;
    } else {
      read_ahead_end_ = n;
    }
  }
  return true;
}

void ConnectionImpl::ResumeReadsLater() {
  if (resume_pending_) return;
  resume_pending_ = true;
  // Behind the other peers' ready sockets, as a readiness event would be.
  context_->RunAfterNextPoll([weak = std::weak_ptr<ConnectionImpl>(shared_from_this())] {
    auto self = weak.lock();
    if (self == nullptr) return;
    self->resume_pending_ = false;
    if (self->error_ || self->connecting_ || !self->GateOpen()) return;
    self->frames_left_in_event_ = kFramesPerEvent;
    self->ProcessReads();
    if (!self->error_) self->UpdateInterest();
  });
}

void ConnectionImpl::ProcessReads() {
  while (!reads_.empty()) {
    ReadOp& op = reads_.front();
    // See Note [Fair reads]: a new frame waits for the next readiness event once
    // this one's budget is spent; its bytes are still in the socket, so the
    // loop comes back — or in the read-ahead, and then the loop is asked to
    // come back. (A frame begun is always finished: its bytes may be all
    // here already, and then no event would come.)
    if (op.prefix_done == 0 && frames_left_in_event_ == 0) {
      if (read_ahead_begin_ < read_ahead_end_) ResumeReadsLater();
      return;
    }
    if (op.prefix_done < kPrefixBytes) {
      if (!ReceiveInto(reinterpret_cast<char*>(&op.length), kPrefixBytes, &op.prefix_done)) {
        return;
      }
      // Note [Bounded frames]: the length comes from the peer. Into a given
      // buffer it must match exactly; otherwise it must fit the limit before
      // a single byte is allocated for it.
      if (op.expected.has_value()) {
        if (op.length != *op.expected) {
          setError(MakeFrameError("peer sent " + std::to_string(op.length) + " bytes where " +
                                      std::to_string(*op.expected) + " were expected",
                                  __FILE__, __LINE__));
          return;
        }
      } else {
        if (op.length > context_->max_frame_bytes()) {
          setError(MakeFrameError("peer announced a " + std::to_string(op.length) +
                                      "-byte frame; the limit is " +
                                      std::to_string(context_->max_frame_bytes()),
                                  __FILE__, __LINE__));
          return;
        }
        op.owned = std::make_unique<char[]>(op.length);
        op.data = op.owned.get();
      }
    }
    if (!ReceiveInto(op.data, op.length, &op.data_done)) return;
    if (frames_left_in_event_ > 0) --frames_left_in_event_;
    ReadOp done = std::move(op);
    reads_.pop_front();
    done.fn(tensorpipe::Error::kSuccess, done.data, done.length);
    if (error_) return;
  }
}

void ConnectionImpl::ProcessWrites() {
  while (!writes_.empty()) {
    WriteOp& op = writes_.front();
    struct iovec iov[2];
    int count = 0;
    if (op.done < kPrefixBytes) {
      iov[count++] = {reinterpret_cast<char*>(&op.length) + op.done, kPrefixBytes - op.done};
      if (op.length > 0) iov[count++] = {const_cast<char*>(op.data), op.length};
    } else {
      const size_t sent = op.done - kPrefixBytes;
      iov[count++] = {const_cast<char*>(op.data) + sent, op.length - sent};
    }
    struct msghdr msg {};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = ::sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      setError(SystemErrorAt("sendmsg", errno, __LINE__));
      return;
    }
    op.done += n;
    if (op.done < kPrefixBytes + op.length) continue;
    auto fn = std::move(op.fn);
    writes_.pop_front();
    fn(tensorpipe::Error::kSuccess);
    if (error_) return;
  }
}

void ConnectionImpl::UpdateInterest() {
  if (!socket_.hasValue()) return;  // waiting to dial again
  int events = 0;
  if (connecting_) {
    events = EPOLLOUT;
  } else if (!GateOpen()) {
    events = gate_out_.empty() ? EPOLLIN : EPOLLOUT;
  } else {
    if (!reads_.empty()) events |= EPOLLIN;
    if (!writes_.empty()) events |= EPOLLOUT;
  }
  if (events == registered_events_) return;
  if (events == 0) {
    context_->unregisterDescriptor(socket_.fd());
  } else {
    context_->registerDescriptor(socket_.fd(), events, shared_from_this());
  }
  registered_events_ = events;
}

void ConnectionImpl::handleErrorImpl() {
  for (auto& op : reads_) op.fn(error_, nullptr, 0);
  reads_.clear();
  for (auto& op : writes_) op.fn(error_);
  writes_.clear();
  if (registered_events_ != 0 && socket_.hasValue()) {
    context_->unregisterDescriptor(socket_.fd());
    registered_events_ = 0;
  }
  socket_.reset();
  if (retry_timer_.hasValue()) {
    context_->unregisterDescriptor(retry_timer_.fd());
    retry_timer_.reset();
  }
  context_->unenroll(*this);
}

}  // namespace tessera::rpc::guarded_tcp
