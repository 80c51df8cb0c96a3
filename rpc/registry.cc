#include "rpc/registry.h"

#include "common/status.h"

namespace tessera::rpc {

Registry::Registry(Registry&& other) {
  MutexLock lock(&other.mu_);
  functions_ = std::move(other.functions_);
}

Registry& Registry::operator=(Registry&& other) {
  if (this == &other) return *this;
  std::map<std::string, RegisteredFunction> moved;
  {
    MutexLock lock(&other.mu_);
    moved = std::move(other.functions_);
  }
  MutexLock lock(&mu_);
  functions_ = std::move(moved);
  return *this;
}

void Registry::Add(RegisteredFunction function) {
  const std::string name = function.name;
  if (name.empty()) throw StatusError(absl::InvalidArgumentError("function name is empty"));
  {
    MutexLock lock(&mu_);
    if (!functions_.emplace(name, std::move(function)).second) {
      throw StatusError(absl::AlreadyExistsError("function '" + name + "' is already registered"));
    }
  }
  waiters_.Notify(name);
}

const RegisteredFunction* Registry::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::Names() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, unused] : functions_) names.push_back(name);
  return names;
}

Future<bool> Registry::WhenRegistered(const std::string& name, absl::Time until,
                                      DeadlineTimer& timer) {
  return waiters_.WhenRegistered(name, until, timer, [&] { return Find(name) != nullptr; });
}

Future<c10::IValue> Registry::Invoke(const std::string& name,
                                     CallContext& context,
                                     std::vector<c10::IValue> args) const {
  return Invoke(Find(name), name, context, std::move(args));
}

Future<c10::IValue> Registry::Invoke(const RegisteredFunction* function,
                                     const std::string& name, CallContext& context,
                                     std::vector<c10::IValue> args) {
  if (function == nullptr) {
    return Future<c10::IValue>::Ready(
        absl::NotFoundError("no function named '" + name + "' is registered"));
  }
  return function->invoke(context, args);
}

}  // namespace tessera::rpc
