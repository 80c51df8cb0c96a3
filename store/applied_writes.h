// The built-in store's record of the writes it applied, by request id, with
// the answers it gave (see Note [Slow is not failed], store_backend.h): an
// attempt of a call it applied already gets the same answer again, and the
// write is not applied twice.
//
// Bounded: the oldest records go first once there are kMaxRecords or their
// answers hold kMaxBytes. A call is sent again within its timeout, while
// the job's other writes — a few per worker at a start, a rejoin or a
// quorum round — come nowhere near evicting it.
//
// Thread-safety: not thread-safe; the store serves it under its own lock.
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace tessera::store {

class AppliedWrites {
 public:
  static constexpr size_t kMaxRecords = 1 << 16;
  static constexpr size_t kMaxBytes = 16 << 20;

  // Whether `request_id` was applied; if so, `response` is its answer.
  // Request id 0 (a caller that sends none) never was.
  bool Replay(uint64_t request_id, google::protobuf::Message* response) const;
  // Records the answer given to `request_id` (nothing for 0).
  void Record(uint64_t request_id, const google::protobuf::Message& response);

  size_t size() const { return answers_.size(); }

 private:
  std::map<uint64_t, std::string> answers_;  // request id -> the answer, serialized
  std::deque<uint64_t> order_;               // request ids, oldest first
  size_t bytes_ = 0;
};

}  // namespace tessera::store
