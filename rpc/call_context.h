// CallContext: what a registered function knows about the call it serves.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace tessera::rpc {

class Runtime;

struct CallContext {
  // The runtime serving the call; use it to call onward (nested RPCs).
  Runtime* runtime = nullptr;
  std::string caller_name;
  std::string caller_role;
  int caller_rank = -1;
  // When the caller stops waiting; onward calls should not outlive it.
  absl::Time deadline = absl::InfiniteFuture();
  // For a method call on a remote object (rref/): the object itself.
  void* self = nullptr;
};

}  // namespace tessera::rpc
