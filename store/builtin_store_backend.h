// BuiltinStoreBackend: the built-in store's client side — gRPC calls to a
// StoreServer (store_server.h), hosted by node 0's launcher or by rank 0.
// Waits happen on the server; with a job secret every call is signed and
// every answer checked (see Note [Store call authentication], store_auth.h).
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "auth/job_secret.h"
#include "store/store_backend.h"

namespace tessera::proto {
class WaitResponse;
}  // namespace tessera::proto

namespace tessera::store {

class BuiltinStoreBackend : public StoreBackend {
 public:
  BuiltinStoreBackend(const std::string& host, int port, auth::JobSecret secret);
  ~BuiltinStoreBackend() override;

  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration timeout) override;
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key, absl::Duration wait,
                                                 absl::Duration reply) override;
  absl::StatusOr<std::vector<std::string>> WaitForKeys(const std::vector<std::string>& keys,
                                                       absl::Duration wait,
                                                       absl::Duration reply) override;
  absl::StatusOr<std::map<std::string, std::string>> GetMany(const std::vector<std::string>& keys,
                                                             absl::Duration wait,
                                                             absl::Duration reply) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration timeout) override;
  absl::StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired,
                                         absl::Duration timeout) override;
  absl::StatusOr<bool> Delete(const std::string& key, absl::Duration timeout) override;
  const std::string& target() const override { return target_; }

 private:
  class Stub;
  // The store's Wait: the keys missing after `wait`, and the present ones'
  // values if `with_values` (GetMany); the answer may take `reply` more.
  absl::Status CallWait(const std::vector<std::string>& keys, absl::Duration wait,
                        absl::Duration reply, bool with_values, proto::WaitResponse* response);
  const std::string target_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace tessera::store
