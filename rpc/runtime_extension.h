// RuntimeExtension: how a layer above rpc/ (RRefs, distributed autograd)
// plugs into a Runtime without rpc/ depending on it.
//
// Extensions are attached at Runtime::Init, before rendezvous, and live as
// long as the runtime. They register internal services (INTERNAL_CALL
// messages, never reachable through the user registry), may provide the
// codec hooks for RRefs, and hear about dead peers and shutdown. Callbacks
// run on the runtime's pool threads, never on transport threads.
#pragma once

#include "absl/status/status.h"
#include "rpc/codec.h"
#include "rpc/registry.h"

namespace tessera::rpc {

class Runtime;

class RuntimeExtension {
 public:
  virtual ~RuntimeExtension() = default;

  // Called once from Runtime::Init; `internal` takes the internal services.
  virtual void Attach(Runtime* runtime, Registry* internal) = 0;
  // Codec hooks for values only this extension understands (at most one
  // extension of a runtime may provide them).
  virtual ValueHooks* value_hooks() { return nullptr; }
  // The connection to `rank` broke: the peer is presumed gone.
  virtual void OnPeerUnavailable(int rank) {}
  // Graceful shutdown, once the workers agree that no call is in flight
  // anywhere: release what this worker holds of others. The runtime then
  // agrees a second time, so whatever this sends is delivered before...
  virtual void ReleaseReferences() {}
  // ...this: report what is still referenced (leaks), if anything.
  virtual absl::Status CheckReleased() { return absl::OkStatus(); }
  // The runtime has closed (after any shutdown, and before it is destroyed):
  // send nothing more through it.
  virtual void OnClosed() {}
};

}  // namespace tessera::rpc
