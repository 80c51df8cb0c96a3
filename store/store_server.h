// StoreServer: the rendezvous key-value service, served over gRPC.
//
// Rank 0 (or a standalone process) runs one; every worker talks to it through
// StoreClient. Blocking calls (Get, Wait) are bounded by the timeout in the
// request, so no server thread waits forever. Started with a job secret, it
// serves only calls signed with it, and signs its answers (store_auth.h).
//
// Thread-safety: thread-safe; Shutdown() may be called once from any thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "auth/job_secret.h"

namespace grpc {
class Server;
}

namespace tessera::store {

class StoreServiceImpl;

class StoreServer {
 public:
  // Binds `host:port` (port 0 picks a free one) and starts serving; with a
  // non-empty `secret`, only to the job's own processes.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host, int port,
                                                            auth::JobSecret secret = {});
  // The store of a job whose processes dial `master_addr:port`: listening
  // at that address when it is this host's, else on every interface (a name
  // or virtual IP that leads here; StoreListenHost in common/host_address.h).
  static absl::StatusOr<std::unique_ptr<StoreServer>> StartForMaster(const std::string& master_addr,
                                                                     int port,
                                                                     auth::JobSecret secret = {});
  ~StoreServer();

  int port() const { return port_; }
  // Forgets every key except those starting with `keep_prefix` (if any): a
  // group restarted on the same store (tessera-run --max_restarts) must not
  // meet its dead predecessors' entries; the launchers' own keys stay.
  void Clear(const std::string& keep_prefix = "");
  void Shutdown();

 private:
  StoreServer() = default;

  std::unique_ptr<StoreServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tessera::store
