#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

#include "rpc/tensorpipe/guarded_tcp/connection_impl.h"
#include "rpc/tensorpipe/guarded_tcp/context_impl.h"
#include "rpc/tensorpipe/guarded_tcp/listener_impl.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc {
namespace guarded_tcp {

std::shared_ptr<ContextImpl> ContextImpl::create(const GuardedTcpOptions& options) {
  return std::make_shared<ContextImpl>(options);
}

// Any two endpoints of this transport can talk (TCP reaches across hosts).
ContextImpl::ContextImpl(const GuardedTcpOptions& options)
    : ContextImplBoilerplate("tessera-tcp"), options_(options) {}

}  // namespace guarded_tcp

std::shared_ptr<tensorpipe::transport::Context> CreateGuardedTcpTransport(
    const GuardedTcpOptions& options) {
  return std::make_shared<tensorpipe::transport::ContextBoilerplate<
      guarded_tcp::ContextImpl, guarded_tcp::ListenerImpl, guarded_tcp::ConnectionImpl>>(
      options);
}

}  // namespace tessera::rpc
