// Connection of the guarded TCP transport: non-blocking socket, driven by
// epoll readiness; queued reads and writes complete in order. See
// guarded_tcp.h for what it refuses.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/connect_retry.h"
#include "rpc/tensorpipe/guarded_tcp/socket_address.h"
#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class ContextImpl;
class ListenerImpl;

class ConnectionImpl final
    : public tensorpipe::transport::ConnectionImplBoilerplate<ContextImpl, ListenerImpl,
                                                             ConnectionImpl>,
      public tensorpipe::EpollLoop::EventHandler {
 public:
  // Accepted side.
  ConnectionImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
                 std::string id, tensorpipe::Socket socket);
  // Connecting side.
  ConnectionImpl(ConstructorToken token, std::shared_ptr<ContextImpl> context,
                 std::string id, std::string addr);

  void handleEventsFromLoop(int events) override;
  // The delay before the next connection attempt is over.
  void OnRetryTimer();

 protected:
  void initImplFromLoop() override;
  void readImplFromLoop(read_callback_fn fn) override;
  void readImplFromLoop(tensorpipe::AbstractNopHolder& object,
                        read_nop_callback_fn fn) override;
  void readImplFromLoop(void* ptr, size_t length, read_callback_fn fn) override;
  void writeImplFromLoop(const void* ptr, size_t length, write_callback_fn fn) override;
  void handleErrorImpl() override;

 private:
  struct ReadOp {
    std::optional<size_t> expected;  // set when reading into a given buffer
    char* data = nullptr;
    std::unique_ptr<char[]> owned;  // buffer for frames of unknown size
    uint64_t length = 0;
    size_t prefix_done = 0;
    size_t data_done = 0;
    read_callback_fn fn;
  };
  struct WriteOp {
    uint64_t length = 0;
    const char* data = nullptr;
    size_t done = 0;  // bytes of prefix + data already sent
    write_callback_fn fn;
  };

  // Reads into data[*done, wanted), from the read-ahead first; false (with
  // the error set if it is one) when the socket has nothing more for now or
  // failed.
  bool ReceiveInto(char* data, size_t wanted, size_t* done);
  void ProcessReads();
  // See Note [Read ahead]: frames already in the read-ahead raise no readiness
  // event; reading them resumes from the loop once this event is over.
  void ResumeReadsLater();
  void ProcessWrites();
  // Registers for exactly the events the queued operations need.
  void UpdateInterest();
  // The connecting side's half of the gate (see Note [Transport gate]): sends the greeting
  // and the proof, checks the challenge. True once TensorPipe's traffic may
  // flow; false while waiting, or with the error set.
  bool PassGate();
  // The connecting side: one attempt to connect (see Note [Connect again],
  // connect_retry.h), and the next after a failure that may pass, or the
  // connection's error once the retries are spent.
  void Dial();
  void DialAgainOrFail(const std::string& cause);
  // Socket options of either side (TCP: no Nagle, keepalive probes).
  void ConfigureSocket();

  std::string addr_;
  std::optional<SocketAddress> sockaddr_;  // the connecting side's, parsed
  ConnectRetry retry_;
  tensorpipe::Fd retry_timer_;  // a timerfd, while an attempt waits
  tensorpipe::Socket socket_;
  bool connecting_ = false;
  // See Note [Transport gate]: TensorPipe's reads and writes wait until it is
  // open: no challenge awaited (gate_) and no gate bytes left to send. An
  // accepted connection passed it in the listener.
  bool GateOpen() const { return !gate_.has_value() && gate_out_.empty(); }
  std::optional<GateClient> gate_;
  std::string gate_out_;                // raw gate bytes still to send
  char gate_in_[kChallengeBytes] = {};  // the challenge, as it arrives
  size_t gate_in_done_ = 0;
  int registered_events_ = 0;
  // Frames still to hand to TensorPipe in this readiness event (see Note [Fair
  // reads], connection_impl.cc).
  static constexpr size_t kFramesPerEvent = 8;
  static constexpr size_t kUnlimitedFrames = ~size_t{0};
  size_t frames_left_in_event_ = kUnlimitedFrames;
  // See Note [Read ahead] (connection_impl.cc): bytes received past the frame
  // being read, [read_ahead_begin_, read_ahead_end_) of read_ahead_.
  static constexpr size_t kReadAheadBytes = 2 << 10;
  std::unique_ptr<char[]> read_ahead_;
  size_t read_ahead_begin_ = 0;
  size_t read_ahead_end_ = 0;
  bool resume_pending_ = false;
  std::deque<ReadOp> reads_;
  std::deque<WriteOp> writes_;
};

}  // namespace tessera::rpc::guarded_tcp
