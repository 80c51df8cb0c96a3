// Transport context of the guarded transports (TCP, Unix): an epoll loop for
// socket readiness (event_loop.h) whose handlers, and all connection state
// changes, run through an on-demand deferred executor (TensorPipe's
// single-loop discipline).
#pragma once

#include <memory>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/event_loop.h"
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class ListenerImpl;
class ConnectionImpl;

class ContextImpl final
    : public tensorpipe::transport::ContextImplBoilerplate<ContextImpl, ListenerImpl,
                                                          ConnectionImpl> {
 public:
  enum class Family { kTcp, kUnix };
  static std::shared_ptr<ContextImpl> create(const GuardedTcpOptions& options, Family family);
  ContextImpl(const GuardedTcpOptions& options, Family family);

  bool inLoop() const override { return executor_.inLoop(); }
  void deferToLoop(std::function<void()> fn) override {
    executor_.deferToLoop(std::move(fn));
  }

  void registerDescriptor(int fd, int events,
                          std::shared_ptr<tensorpipe::EpollLoop::EventHandler> handler) {
    loop_.registerDescriptor(fd, events, std::move(handler));
  }
  void unregisterDescriptor(int fd) { loop_.unregisterDescriptor(fd); }
  // A connection wrote: its peer's answer may follow soon (event_loop.h).
  void ExpectAnswer() { loop_.ExpectAnswer(); }
  // Runs `fn` on the loop behind the next poll's handlers (event_loop.h).
  void RunAfterNextPoll(std::function<void()> fn) { loop_.RunAfterNextPoll(std::move(fn)); }

  size_t max_frame_bytes() const { return options_.max_frame_bytes; }
  const std::string& advertise_host() const { return options_.advertise_host; }
  const auth::JobSecret& secret() const { return options_.secret; }
  absl::Duration connect_budget() const { return options_.connect_budget; }
  bool unix_domain() const { return family_ == Family::kUnix; }

 protected:
  void handleErrorImpl() override { loop_.close(); }
  void joinImpl() override { loop_.join(); }

 private:
  const GuardedTcpOptions options_;
  const Family family_;
  tensorpipe::OnDemandDeferredExecutor executor_;
  EventLoop loop_{executor_, EventLoop::SpinFromEnv()};
};

}  // namespace tessera::rpc::guarded_tcp
