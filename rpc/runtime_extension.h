// RuntimeExtension: how a layer above rpc/ (RRefs, distributed autograd)
// plugs into a Runtime without rpc/ depending on it.
//
// Extensions are attached at Runtime::Create, before rendezvous, and live as
// long as the runtime. They register internal services (INTERNAL_CALL
// messages, never reachable through the user registry), may provide the
// codec hooks for RRefs, and hear about dead peers and shutdown. Callbacks
// run on the runtime's pool threads, never on transport threads.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "rpc/codec.h"
#include "rpc/message.h"
#include "rpc/registry.h"

namespace tessera::rpc {

class Runtime;

// The serving side of one call, as a CallObserver sees it (see below).
class ServeScope {
 public:
  virtual ~ServeScope() = default;
  // Around the synchronous part of the handler, on the serving thread.
  virtual void Enter() = 0;
  virtual void Exit() = 0;
  // The handler's response is about to be sent back to `to_rank` (on
  // whatever thread the handler finished).
  virtual absl::Status OnSendResponse(int to_rank, Message* response) = 0;
};

// Sees every call's encoded messages — distributed autograd records the
// tensors that cross workers here. Runs on the calling and serving threads:
// must be cheap when it has nothing to do. An error fails that call (sender
// side) or answers it with the error (serving side); the worker goes on.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // A request (CALL or INTERNAL_CALL) is about to be sent to `to_rank`.
  virtual absl::Status OnSendRequest(int to_rank, Message* request) = 0;
  // A request from `from_rank` arrived, before its arguments are decoded.
  // Returns the scope its handler runs in, or nullptr for none.
  virtual absl::StatusOr<std::shared_ptr<ServeScope>> OnReceiveRequest(
      int from_rank, const Message& request) = 0;
  // The response to one of this worker's requests arrived from `from_rank`,
  // before its result is decoded.
  virtual absl::Status OnReceiveResponse(int from_rank, const Message& response) = 0;
  // What this thread's calls carry (the current autograd context), for a
  // continuation that will make calls from another thread: captured now,
  // the returned function is called on that thread and makes the state
  // current until its result is destroyed. Empty: nothing to carry.
  virtual std::function<std::shared_ptr<void>()> CaptureThreadState() { return {}; }
};

class RuntimeExtension {
 public:
  virtual ~RuntimeExtension() = default;

  // Called once from Runtime::Create; `internal` takes the internal
  // services (typed: rpc/internal_service.h).
  virtual void Attach(Runtime* runtime, Registry* internal) = 0;
  // Codec hooks for values only this extension understands (at most one
  // extension of a runtime may provide them).
  virtual ValueHooks* value_hooks() { return nullptr; }
  // Observer of every call's messages (at most one extension provides it).
  virtual CallObserver* call_observer() { return nullptr; }
  // The connection to `rank` broke: the peer is presumed gone.
  virtual void OnPeerUnavailable(int rank) {}
  // A new incarnation of `rank` rejoined the job (after OnPeerUnavailable
  // released the old one's state): the rank may be served again.
  virtual void OnPeerRejoined(int rank) {}
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
