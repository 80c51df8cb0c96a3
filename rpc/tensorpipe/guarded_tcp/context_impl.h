// Transport context of the guarded TCP transport: an epoll loop for socket
// readiness whose handlers, and all connection state changes, run through an
// on-demand deferred executor (TensorPipe's single-loop discipline).
#pragma once

#include <memory>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class ListenerImpl;
class ConnectionImpl;

class ContextImpl final
    : public tensorpipe::transport::ContextImplBoilerplate<ContextImpl, ListenerImpl,
                                                          ConnectionImpl> {
 public:
  static std::shared_ptr<ContextImpl> create(const GuardedTcpOptions& options);
  explicit ContextImpl(const GuardedTcpOptions& options);

  bool inLoop() const override { return executor_.inLoop(); }
  void deferToLoop(std::function<void()> fn) override {
    executor_.deferToLoop(std::move(fn));
  }

  void registerDescriptor(int fd, int events,
                          std::shared_ptr<tensorpipe::EpollLoop::EventHandler> handler) {
    loop_.registerDescriptor(fd, events, std::move(handler));
  }
  void unregisterDescriptor(int fd) { loop_.unregisterDescriptor(fd); }

  size_t max_frame_bytes() const { return options_.max_frame_bytes; }
  const std::string& advertise_host() const { return options_.advertise_host; }
  const auth::JobSecret& secret() const { return options_.secret; }

 protected:
  void handleErrorImpl() override { loop_.close(); }
  void joinImpl() override { loop_.join(); }

 private:
  const GuardedTcpOptions options_;
  tensorpipe::OnDemandDeferredExecutor executor_;
  tensorpipe::EpollLoop loop_{executor_};
};

}  // namespace tessera::rpc::guarded_tcp
