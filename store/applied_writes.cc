#include "store/applied_writes.h"

namespace tessera::store {

bool AppliedWrites::Replay(uint64_t request_id, google::protobuf::Message* response) const {
  if (request_id == 0) return false;
  auto it = answers_.find(request_id);
  if (it == answers_.end()) return false;
  return response->ParseFromString(it->second);
}

void AppliedWrites::Record(uint64_t request_id, const google::protobuf::Message& response) {
  if (request_id == 0) return;
  auto [it, added] = answers_.emplace(request_id, response.SerializeAsString());
  if (!added) return;
  order_.push_back(request_id);
  bytes_ += it->second.size();
  while (order_.size() > kMaxRecords || (bytes_ > kMaxBytes && order_.size() > 1)) {
    auto oldest = answers_.find(order_.front());
    bytes_ -= oldest->second.size();
    answers_.erase(oldest);
    order_.pop_front();
  }
}

}  // namespace tessera::store
