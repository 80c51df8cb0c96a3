#include "rpc/registry.h"

namespace tessera::rpc {

absl::Status Registry::Add(RegisteredFunction function) {
  const std::string name = function.name;
  if (name.empty()) return absl::InvalidArgumentError("function name is empty");
  if (!functions_.emplace(name, std::move(function)).second) {
    return absl::AlreadyExistsError("function '" + name + "' is already registered");
  }
  return absl::OkStatus();
}

const RegisteredFunction* Registry::Find(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : functions_) names.push_back(name);
  return names;
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
