// Where a job's rendezvous store is, as one string (tessera-run --store,
// TESSERA_STORE in a worker's environment):
//   host:port                         the built-in store (a StoreServer)
//   etcd://h1:2379,h2:2379,h3:2379    an etcd cluster (etcd_store_backend.h),
//   etcd://h1:2379,h2:2379/my-job     the job's keys under /tessera/my-job/
// An etcd URL without a path keeps its keys under /tessera/default/; jobs
// sharing an etcd cluster give each its own path.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "store/store_client.h"

namespace tessera::store {

struct StoreUrl {
  bool etcd = false;
  // host:port of the built-in store, or each etcd member's client endpoint.
  std::vector<std::string> endpoints;
  // etcd only: the prefix of every key of the job ("/tessera/<path>/").
  std::string key_prefix;
  // The first endpoint's host: what a worker routes to (MASTER_ADDR).
  std::string host;
  int port = 0;
};

// An error names what is malformed (no endpoints, a bad port, a path
// with characters other than letters, digits, '-', '_' and '.').
absl::StatusOr<StoreUrl> ParseStoreUrl(const std::string& url);

// A client of the store at `url`.
absl::StatusOr<std::unique_ptr<StoreClient>> ConnectStore(const std::string& url,
                                                          absl::Duration default_timeout,
                                                          auth::JobSecret secret);

}  // namespace tessera::store
