// GlobalId: (worker that made it, counter there) — unique across the job.
// Identifies RRef values and the forks (user references) of them.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "proto/rpc.pb.h"

namespace tessera::rref {

struct GlobalId {
  int32_t worker = -1;
  int64_t local = 0;

  bool operator<(const GlobalId& o) const {
    return std::tie(worker, local) < std::tie(o.worker, o.local);
  }
  bool operator==(const GlobalId& o) const { return worker == o.worker && local == o.local; }
  std::string ToString() const {
    return "(" + std::to_string(worker) + "," + std::to_string(local) + ")";
  }
  static GlobalId FromProto(const proto::GlobalId& id) { return {id.worker(), id.local()}; }
  void ToProto(proto::GlobalId* out) const {
    out->set_worker(worker);
    out->set_local(local);
  }
};

}  // namespace tessera::rref
