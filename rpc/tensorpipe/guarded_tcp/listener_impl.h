// Listener of the guarded TCP transport.
//
// Note [Hello gate]: an accepted connection first passes the job-secret
// gate (see Note [Transport gate], secret_gate.h), read here in fixed-size
// pieces, so nothing of TensorPipe runs for a peer that does not hold the
// secret. Then, because TensorPipe's core listener fails as a whole when
// one accepted connection does not deliver a valid hello (its first frame),
// the listener hands a connection over only once that frame has fully
// arrived, is no larger than kMaxHelloBytes, and parses (bounded:
// see Note [Bounded nop reads]) as a TensorPipe hello — it only peeks, so the
// core still reads the frame itself. Anything else is closed here with a
// logged reason. At most kMaxPendingHellos connections may be waiting
// without having proved the secret (a new one makes room: see Note [Full gate]),
// each for at most kHelloTimeout. Transient accept errors do not end the
// listener either.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "common/log_rate_limiter.h"
#include "rpc/tensorpipe/guarded_tcp/hello_frame.h"
#include "rpc/tensorpipe/guarded_tcp/socket_address.h"
#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class ContextImpl;
class ConnectionImpl;

class ListenerImpl final
    : public tensorpipe::transport::ListenerImplBoilerplate<ContextImpl, ListenerImpl,
                                                           ConnectionImpl>,
      public tensorpipe::EpollLoop::EventHandler {
 public:
  ListenerImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
               std::string id, std::string addr);

  void handleEventsFromLoop(int events) override;
  // A pending connection's socket became readable (or closed).
  void OnHelloEvent(int fd, int events);

  static constexpr size_t kMaxPendingHellos = 256;
  // Accepts per readiness event: enough to drain a storm's backlog quickly,
  // few enough that established connections' events are not starved.
  static constexpr int kMaxAcceptsPerWakeup = 64;
  // Generous: the gate's bound (see Note [Full gate]), not this timeout, holds
  // strangers back, and on a host running a job's connection storm the
  // job's own connections wait seconds for a busy loop (10 s failed 128
  // workers on two cores).
  static constexpr absl::Duration kHelloTimeout = absl::Seconds(60);

 protected:
  void initImplFromLoop() override;
  void acceptImplFromLoop(accept_callback_fn fn) override;
  std::string addrImplFromLoop() const override;
  void handleErrorImpl() override;

 private:
  const std::string requested_addr_;
  std::optional<SocketAddress> sockaddr_;
  tensorpipe::Socket socket_;
  // Closes a pending connection, logging why (a warning unless `routine`).
  void Drop(int fd, const std::string& why, bool routine = false);
  void DropStaleHellos();
  void MakeRoomAtTheGate();
  void Deliver(tensorpipe::Socket socket);

  // How far an accepted connection has come (see Note [Hello gate]).
  enum class Stage { kGreeting, kProof, kHello };
  struct PendingHello {
    tensorpipe::Socket socket;
    absl::Time since;
    GateServer gate;
    Stage stage = Stage::kGreeting;
    std::string received;  // of the current gate message
  };
  // Reads the gate's messages; true once the peer proved the secret.
  bool PassGate(int fd, PendingHello& pending, bool closed);

  std::deque<accept_callback_fn> fns_;
  std::map<int, PendingHello> pending_;       // waiting for a full hello
  std::deque<tensorpipe::Socket> ready_;       // hello complete, not yet taken
  bool listening_registered_ = false;
  // Closed connections are logged, but not one line each in a flood.
  LogRateLimiter drops_logged_{10, absl::Seconds(10)};
};

}  // namespace tessera::rpc::guarded_tcp
