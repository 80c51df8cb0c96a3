// Registry: functions that peers may call, by name, with their C++ signature.
//
//   Registry registry;
//   registry.Register("add", [](at::Tensor a, at::Tensor b) { return a + b; });
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
// Thread-safety: register everything before the runtime starts; lookups are
// then lock-free reads of an immutable map.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/future.h"
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
  // Registers `fn` under `name`, callable by the workers `allowed` lists
  // (rpc/allow_list.h; default: all); AlreadyExists if the name is taken.
  template <typename Fn>
  absl::Status Register(const std::string& name, Fn fn, AllowList allowed = {}) {
    return Add(RegisteredFunction{name, Signature<Fn>(), Erase(name, std::move(fn)),
                                  std::move(allowed)});
  }

  // nullptr when no function has that name.
  const RegisteredFunction* Find(const std::string& name) const;
  std::vector<std::string> Names() const;

  // Runs the named function with `args`; all failures come back in the future.
  Future<c10::IValue> Invoke(const std::string& name, CallContext& context,
                             std::vector<c10::IValue> args) const;
  // The same for a function already looked up (nullptr: NotFound for `name`).
  static Future<c10::IValue> Invoke(const RegisteredFunction* function, const std::string& name,
                                    CallContext& context, std::vector<c10::IValue> args);

 private:
  absl::Status Add(RegisteredFunction function);
  std::map<std::string, RegisteredFunction> functions_;
};

}  // namespace tessera::rpc
