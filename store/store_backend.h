// StoreBackend: what a rendezvous store must do for StoreClient — the
// built-in store (builtin_store_backend.h, served by StoreServer on node 0)
// or an etcd cluster (etcd_store_backend.h). StoreClient owns the deadlines'
// defaults and the error messages' "store <target>: <what>" prefix; a
// backend gets a deadline with every call and reports what went wrong.
//
// Note [Slow is not failed]: a read waits up to `wait` for its keys, and its
// answer may then take up to `reply` more — StoreClient's default timeout,
// the job's own budget (the runtime's is --rdzv_timeout), never a constant.
// 128 workers reading 128 keys each from one store on a loaded 2-core
// machine got their answers after more than the 5 s once allowed, and the
// job failed where it only had to wait. Likewise a call is sent again
// while it fails Unavailable, until its deadline: a store host too loaded
// to answer a keepalive ping in time has its connections dropped by gRPC,
// calls in flight with them. Set, Get and Wait are safe to repeat. Add,
// CompareSet and Delete may have been applied before the connection
// dropped: the built-in store's client sends each with a request id, and
// the server applies an id once, answering a repeat as it answered the
// first (store/applied_writes.h). etcd repeats CompareSet and Delete (a
// lost CompareSet that was applied finds its own value, a lost Delete
// that was applied answers false) but not Add, which fails Unavailable
// saying it may have been applied.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::store {

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  virtual absl::Status Set(const std::string& key, const std::string& value,
                           absl::Duration timeout) = 0;
  // Waits up to `wait` for the key to exist: its value, or nullopt if it
  // did not appear in time. The answer may take `reply` more (see Note [Slow is
  // not failed]), as for the two reads below.
  virtual absl::StatusOr<std::optional<std::string>> Get(const std::string& key,
                                                         absl::Duration wait,
                                                         absl::Duration reply) = 0;
  // Waits up to `wait` for every key: those still missing at the deadline.
  virtual absl::StatusOr<std::vector<std::string>> WaitForKeys(const std::vector<std::string>& keys,
                                                               absl::Duration wait,
                                                               absl::Duration reply) = 0;
  // Waits up to `wait` for every key: the values of those that exist then,
  // by key (one call, where a Get per key would make N workers reading N
  // keys each cost the store N² calls).
  virtual absl::StatusOr<std::map<std::string, std::string>> GetMany(
      const std::vector<std::string>& keys, absl::Duration wait, absl::Duration reply) = 0;
  // Adds `delta` to the integer at `key` (absent: 0), atomically.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                                      absl::Duration timeout) = 0;
  // Sets `desired` if the key holds `expected` (or is absent and `expected`
  // is empty); returns the value after the call ("" if absent).
  virtual absl::StatusOr<std::string> CompareSet(const std::string& key,
                                                 const std::string& expected,
                                                 const std::string& desired,
                                                 absl::Duration timeout) = 0;
  virtual absl::StatusOr<bool> Delete(const std::string& key, absl::Duration timeout) = 0;

  // Where the store is, for messages: host:port, or etcd://endpoints/prefix.
  virtual const std::string& target() const = 0;
};

}  // namespace tessera::store
