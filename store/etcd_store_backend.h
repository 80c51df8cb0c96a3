// EtcdStoreBackend: the rendezvous store on an etcd cluster (etcd's v3 API
// over gRPC; proto/etcd_kv.proto), so that no single machine holds a job's
// rendezvous, membership and quorum: with three members, losing any one
// machine leaves the store working (tessera-run --store etcd://...).
//
// Note [The store on etcd]
// - Keys live under the job's prefix (store_url.h). Every read is etcd's
//   default, linearizable: a member cut off from the majority answers
//   nothing rather than something stale.
// - Waits (Get, WaitForKeys) read the keys, then watch them from the
//   revision of that read, so no write between the two is missed; the watch
//   ends at the deadline.
// - Add and CompareSet are transactions: compare-and-set on the key's
//   modification revision (Add, retried until it wins) or value. etcd has
//   no increment of its own. Add(key, 0) only reads.
// - Calls go to every member in turn (gRPC's round_robin over all
//   endpoints); a member that dies is dropped once its connection fails —
//   at once if its host answers with a reset, within a keepalive period
//   (10 s + 5 s) if it went silent. Calls that fail Unavailable are retried
//   on the others until their deadline — all but Add, which may have been
//   applied before the answer was lost (it fails instead, saying so).
// - With a job secret, each value is stored with its HMAC over the key and
//   value (auth/mac.h), and a value without a valid one is refused, naming
//   the key: another job under the same prefix, or anyone who can write to
//   etcd without the secret, cannot feed workers addresses or decisions.
//   Deterministic, so CompareSet can compare stored bytes. Not covered:
//   secrecy (values are in the clear, as on the built-in store), and replay
//   of an older value of the same key by someone who can write to etcd —
//   etcd's own authentication and TLS (not configured by Tessera) keep such
//   writers out.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "auth/job_secret.h"
#include "store/store_backend.h"
#include "store/store_url.h"

namespace tessera::store {

class EtcdStoreBackend : public StoreBackend {
 public:
  // Resolves the endpoints (an error names one that does not resolve);
  // connects lazily, on the first call.
  static absl::StatusOr<std::unique_ptr<EtcdStoreBackend>> Connect(const StoreUrl& url,
                                                                   auth::JobSecret secret);
  ~EtcdStoreBackend() override;

  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration timeout) override;
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key, absl::Duration wait,
                                                 absl::Duration reply) override;
  absl::StatusOr<std::vector<std::string>> WaitForKeys(const std::vector<std::string>& keys,
                                                       absl::Duration wait,
                                                       absl::Duration reply) override;
  absl::StatusOr<std::map<std::string, std::string>> GetMany(const std::vector<std::string>& keys,
                                                             absl::Duration wait,
                                                             absl::Duration reply) override {
    return Await(keys, wait, reply);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration timeout) override;
  absl::StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired,
                                         absl::Duration timeout) override;
  absl::StatusOr<bool> Delete(const std::string& key, absl::Duration timeout) override;
  const std::string& target() const override { return target_; }

  // How many keys the job's prefix holds (the launcher refuses to start a
  // job on a prefix an earlier one left keys under).
  absl::StatusOr<int64_t> CountKeys(absl::Duration timeout);
  // Deletes the job's keys but those starting with `keep_prefix` (if not
  // empty): StoreServer::Clear's counterpart for a restarted group.
  absl::Status Clear(const std::string& keep_prefix, absl::Duration timeout);

 private:
  class Stub;
  EtcdStoreBackend(std::string target, std::string key_prefix, std::string grpc_target,
                   auth::JobSecret secret);

  // Waits up to `wait` for `keys`: the values of those that exist; the
  // answers may take `reply` more.
  absl::StatusOr<std::map<std::string, std::string>> Await(const std::vector<std::string>& keys,
                                                           absl::Duration wait,
                                                           absl::Duration reply);
  std::string Full(const std::string& key) const { return key_prefix_ + key; }
  // The stored form of `value` at `key` (see Note [The store on etcd]), and back.
  std::string Seal(const std::string& key, const std::string& value) const;
  absl::StatusOr<std::string> Unseal(const std::string& key, const std::string& stored) const;

  const std::string target_;
  const std::string key_prefix_;
  const auth::JobSecret secret_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace tessera::store
