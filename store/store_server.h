// StoreServer: the rendezvous key-value service, served over gRPC.
//
// Rank 0 (or a standalone process) runs one; every worker talks to it through
// StoreClient. Blocking calls (Get, Wait) are bounded by the timeout in the
// request, so no server thread waits forever.
//
// Thread-safety: thread-safe; Shutdown() may be called once from any thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}

namespace tessera::store {

class StoreServiceImpl;

class StoreServer {
 public:
  // Binds `host:port` (port 0 picks a free one) and starts serving.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      const std::string& host, int port);
  ~StoreServer();

  int port() const { return port_; }
  // Forgets every key: a group restarted on the same store (tessera-run
  // --max_restarts) must not meet its dead predecessors' entries.
  void Clear();
  void Shutdown();

 private:
  StoreServer() = default;

  std::unique_ptr<StoreServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tessera::store
