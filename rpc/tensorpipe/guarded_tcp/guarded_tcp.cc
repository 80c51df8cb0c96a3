#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

#include <sys/stat.h>

#include <fstream>

#include "rpc/tensorpipe/guarded_tcp/connection_impl.h"
#include "rpc/tensorpipe/guarded_tcp/context_impl.h"
#include "rpc/tensorpipe/guarded_tcp/listener_impl.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc {
namespace guarded_tcp {
namespace {

// Any two endpoints of the TCP flavour can talk (TCP reaches across hosts);
// the Unix flavour's only within one network namespace of one boot.
std::string DomainDescriptor(ContextImpl::Family family) {
  return family == ContextImpl::Family::kTcp ? "tessera-tcp" : UnixDomainDescriptor();
}

}  // namespace

std::shared_ptr<ContextImpl> ContextImpl::create(const GuardedTcpOptions& options,
                                                 Family family) {
  return std::make_shared<ContextImpl>(options, family);
}

ContextImpl::ContextImpl(const GuardedTcpOptions& options, Family family)
    : ContextImplBoilerplate(DomainDescriptor(family)), options_(options), family_(family) {}

}  // namespace guarded_tcp

namespace {

using Context = tensorpipe::transport::ContextBoilerplate<
    guarded_tcp::ContextImpl, guarded_tcp::ListenerImpl, guarded_tcp::ConnectionImpl>;

}  // namespace

std::shared_ptr<tensorpipe::transport::Context> CreateGuardedTcpTransport(
    const GuardedTcpOptions& options) {
  return std::make_shared<Context>(options, guarded_tcp::ContextImpl::Family::kTcp);
}

std::shared_ptr<tensorpipe::transport::Context> CreateGuardedUnixTransport(
    const GuardedTcpOptions& options) {
  return std::make_shared<Context>(options, guarded_tcp::ContextImpl::Family::kUnix);
}

std::string UnixDomainDescriptor() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat netns {};
  const bool has_netns = ::stat("/proc/self/ns/net", &netns) == 0;
  return "tessera-unix:" + boot_id + ":" +
         (has_netns ? std::to_string(netns.st_dev) + "." + std::to_string(netns.st_ino) : "?");
}

}  // namespace tessera::rpc
