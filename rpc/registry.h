// Registry: functions that peers may call, by name, with their C++ signature.
//
//   runtime.Register("add", [](at::Tensor a, at::Tensor b) { return a + b; });
//
// A function may take `CallContext&` as its first parameter (to call onward,
// or to learn who called), and may return a value, absl::StatusOr<T>,
// absl::Status, void, or Future<T> (asynchronous execution: the response is
// sent when the future completes, without holding a thread meanwhile).
// Arguments are checked against the signature before the function runs; a
// mismatch is an InvalidArgument error naming the function, the expected
// signature and the types that arrived. Exceptions thrown by the function
// become an error with its message. No code travels over the wire.
//
// Registering is a programming act: a name registered twice, or an empty
// name, throws StatusError at once (README, "Errors").
//
// Functions may be registered before the runtime starts or at any time
// after (see Note [Late registration], rpc/runtime.h). Functions are never
// removed, so a looked-up function stays valid for the registry's life.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/future.h"
#include "common/mutex.h"
#include "common/registration_waiters.h"
#include "rpc/allow_list.h"
#include "rpc/call_context.h"
#include "rpc/function_adapter.h"

namespace tessera::rpc {

struct RegisteredFunction {
  std::string name;
  std::string signature;  // e.g. "(Tensor, int) -> Tensor"
  ErasedFunction invoke;
  AllowList allowed;  // empty: every worker of the job
};

class Registry {
 public:
  Registry() = default;
  Registry(Registry&& other);
  Registry& operator=(Registry&& other);

  // Registers `fn` under `name`, callable by the workers `allowed` lists
  // (rpc/allow_list.h; default: all). Throws StatusError (AlreadyExists) if
  // the name is taken.
  template <typename Fn>
  void Register(const std::string& name, Fn fn, AllowList allowed = {}) {
    Add(RegisteredFunction{name, Signature<Fn>(), Erase(name, std::move(fn)), std::move(allowed)});
  }

  // nullptr when no function has that name (yet).
  const RegisteredFunction* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  // Completes with true when `name` is registered (at once if it is), or
  // with false at `until` (see Note [Late registration]).
  Future<bool> WhenRegistered(const std::string& name, absl::Time until, DeadlineTimer& timer);
  // Calls waiting now for `name` to be registered.
  size_t CallsWaitingFor(const std::string& name) const { return waiters_.Waiting(name); }

  // Runs the named function with `args`; all failures come back in the future.
  Future<c10::IValue> Invoke(const std::string& name, CallContext& context,
                             std::vector<c10::IValue> args) const;
  // The same for a function already looked up (nullptr: NotFound for `name`).
  static Future<c10::IValue> Invoke(const RegisteredFunction* function, const std::string& name,
                                    CallContext& context, std::vector<c10::IValue> args);

 private:
  void Add(RegisteredFunction function);

  mutable Mutex mu_;
  std::map<std::string, RegisteredFunction> functions_ ABSL_GUARDED_BY(mu_);
  RegistrationWaiters waiters_;
};

}  // namespace tessera::rpc
