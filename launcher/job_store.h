// JobStore: the rendezvous store of a job as tessera-run sees it. Node 0 of
// a job without --store hosts the built-in store (on a free port with
// --standalone, else at --master_addr:--master_port); node 0 with --store
// etcd://... claims the job's prefix there (launcher/etcd_job_prefix.h);
// other nodes, and --join, use the store someone else serves.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "launcher/launcher.h"
#include "store/etcd_store_backend.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::launcher {

class JobStore {
 public:
  // Hosts, claims or finds the store, and checks that it can be reached.
  // The error says what failed, for the launcher to print.
  static absl::StatusOr<JobStore> Open(const LaunchOptions& options, auth::JobSecret secret);

  // Where workers and launchers reach it (host:port, or the etcd URL).
  const std::string& address() const { return address_; }
  // MASTER_PORT as workers are told it (the hosted store's, when hosted here).
  int port() const { return port_; }
  // What to tell the user when this launcher serves or claimed the store
  // ("rendezvous store at 127.0.0.1:40123"); empty otherwise.
  const std::string& announcement() const { return announcement_; }

  // A client of the store (checked reachable by Open; only a name that
  // stopped resolving since could fail: StatusError).
  std::unique_ptr<store::StoreClient> Connect() const;
  // Forgets an attempt's keys but those under `keep_prefix`, where this
  // launcher owns them (hosted here, or claimed in etcd); else does nothing.
  // An error is etcd's, within `timeout`.
  absl::Status Clear(const std::string& keep_prefix, absl::Duration timeout);

 private:
  JobStore() = default;

  auth::JobSecret secret_;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::EtcdStoreBackend> etcd_;
  int port_ = 0;
  std::string address_;
  std::string announcement_;
};

}  // namespace tessera::launcher
