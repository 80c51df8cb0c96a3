// The RRef protocol's messages (see Note [RRef protocol], rref_context.h), typed
// (see Note [Typed internal services], rpc/internal_service.h). Ids travel as
// their two parts (worker rank, local counter).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <tuple>
#include <vector>

#include "rpc/service_names.h"
#include "rref/global_id.h"

namespace tessera::rref {

// remote() of a registered function: the owner registers the caller's fork
// and keeps the function's result. Acknowledged once the fork is registered.
struct RemoteRequest {
  static constexpr const char* kService = rpc::services::kRRefRemote;
  static constexpr bool kCarriesUserValues = true;
  using Response = void;
  GlobalId rref, fork;
  std::string function, type;
  std::vector<c10::IValue> args;
  auto Fields() {
    return std::tie(rref.worker, rref.local, fork.worker, fork.local, function, type, args);
  }
};

// remote() of an object of a registered class.
struct RemoteNewRequest {
  static constexpr const char* kService = rpc::services::kRRefRemoteNew;
  static constexpr bool kCarriesUserValues = true;
  using Response = void;
  GlobalId rref, fork;
  std::string class_name;
  std::vector<c10::IValue> args;
  auto Fields() {
    return std::tie(rref.worker, rref.local, fork.worker, fork.local, class_name, args);
  }
};

// remote() of a method of the object `target` (owned by the same worker).
struct RemoteMethodRequest {
  static constexpr const char* kService = rpc::services::kRRefRemoteMethod;
  static constexpr bool kCarriesUserValues = true;
  using Response = void;
  GlobalId target, rref, fork;
  std::string method, type;
  std::vector<c10::IValue> args;
  auto Fields() {
    return std::tie(target.worker, target.local, rref.worker, rref.local, fork.worker, fork.local,
                    method, type, args);
  }
};

// A method call through an RRef; the result comes back. `may_be_early`:
// the creator's own call, which may arrive before the creation (see Note
// [Early arrivals]).
struct CallRequest {
  static constexpr const char* kService = rpc::services::kRRefCall;
  static constexpr bool kCarriesUserValues = true;
  using Response = c10::IValue;
  GlobalId rref;
  bool may_be_early = false;
  std::string method;
  std::vector<c10::IValue> args;
  auto Fields() { return std::tie(rref.worker, rref.local, may_be_early, method, args); }
};

// to_here(): a copy of the value.
struct FetchRequest {
  static constexpr const char* kService = rpc::services::kRRefFetch;
  static constexpr bool kCarriesUserValues = true;
  using Response = c10::IValue;
  GlobalId rref;
  bool may_be_early = false;
  auto Fields() { return std::tie(rref.worker, rref.local, may_be_early); }
};

// A child fork asks the owner to register it (G2).
struct ForkRequest {
  static constexpr const char* kService = rpc::services::kRRefFork;
  static constexpr bool kCarriesUserValues = false;
  using Response = bool;
  GlobalId rref, fork;
  auto Fields() { return std::tie(rref.worker, rref.local, fork.worker, fork.local); }
};

// The child tells its parent the owner knows of it: the parent may let go.
struct ChildAcceptRequest {
  static constexpr const char* kService = rpc::services::kRRefChildAccept;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  GlobalId fork;
  auto Fields() { return std::tie(fork.worker, fork.local); }
};

// A user reference is gone.
struct DeleteRequest {
  static constexpr const char* kService = rpc::services::kRRefDelete;
  static constexpr bool kCarriesUserValues = false;
  using Response = void;
  GlobalId rref, fork;
  auto Fields() { return std::tie(rref.worker, rref.local, fork.worker, fork.local); }
};

}  // namespace tessera::rref
