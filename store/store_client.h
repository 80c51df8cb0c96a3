// StoreClient: a worker's connection to the rendezvous store — the built-in
// one (a StoreServer) or an etcd cluster (store_url.h picks by address).
//
// Every call has a deadline (the client's default, or the one given). A call
// made before the server is up waits for it until the deadline, so workers
// may start in any order. A read that waits for keys may take the default
// timeout beyond its wait for the answer (see Note [Slow is not failed],
// store_backend.h), and a deadline's error says how busy the host was. With a job secret, answers
// are believed only from a store that knows it (store_auth.h; etcd_store_backend.h).
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "store/store_backend.h"

namespace tessera::store {

class StoreClient {
 public:
  StoreClient(const std::string& host, int port, absl::Duration default_timeout = absl::Seconds(60),
              auth::JobSecret secret = {});
  // Over any backend; `host` is the store's host as other layers route to it.
  StoreClient(std::unique_ptr<StoreBackend> backend, std::string host,
              absl::Duration default_timeout);
  ~StoreClient();

  absl::Status Set(const std::string& key, const std::string& value);
  absl::Status Set(const std::string& key, const std::string& value, absl::Duration timeout);
  // Waits for the key up to `timeout`; NotFound-free: DeadlineExceeded names it.
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);
  absl::StatusOr<std::string> Get(const std::string& key);
  // Waits until all keys exist; DeadlineExceeded lists the missing ones.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout);
  // Like Wait, but returns the keys still missing at the deadline (empty when
  // all arrived) instead of an error.
  absl::StatusOr<std::vector<std::string>> WaitForKeys(const std::vector<std::string>& keys,
                                                       absl::Duration timeout);
  // Waits up to `timeout` for all keys, in one call: the values of those
  // present then, by key (missing ones are absent from the map, no error).
  absl::StatusOr<std::map<std::string, std::string>> GetMany(const std::vector<std::string>& keys,
                                                             absl::Duration timeout);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  absl::StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired);
  absl::StatusOr<bool> Delete(const std::string& key);

  const std::string& target() const { return backend_->target(); }
  // The store's host as given (MASTER_ADDR): what other layers route to.
  const std::string& host() const { return host_; }
  absl::Duration default_timeout() const { return default_timeout_; }

 private:
  // `status` with "store <target>: <what>: " before its message.
  absl::Status Annotated(const absl::Status& status, const std::string& what) const;

  const std::unique_ptr<StoreBackend> backend_;
  const std::string host_;
  const absl::Duration default_timeout_;
};

}  // namespace tessera::store
