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
  std::map<uint64_t, Promise<bool>> waiters;
  {
    MutexLock lock(&mu_);
    if (!functions_.emplace(name, std::move(function)).second) {
      throw StatusError(
          absl::AlreadyExistsError("function '" + name + "' is already registered"));
    }
    auto it = waiting_.find(name);
    if (it != waiting_.end()) {
      waiters = std::move(it->second);
      waiting_.erase(it);
    }
  }
  for (auto& [id, promise] : waiters) promise.Set(true);
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

Future<bool> Registry::WhenRegistered(const std::string& name, uint64_t* waiter) {
  MutexLock lock(&mu_);
  *waiter = 0;
  if (functions_.count(name) > 0) return Future<bool>::Ready(true);
  *waiter = next_waiter_++;
  return waiting_[name][*waiter].GetFuture();
}

void Registry::Expire(const std::string& name, uint64_t waiter) {
  Promise<bool> expired;
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(name);
    if (it == waiting_.end()) return;
    auto found = it->second.find(waiter);
    if (found == it->second.end()) return;
    expired = std::move(found->second);
    it->second.erase(found);
    if (it->second.empty()) waiting_.erase(it);
  }
  expired.Set(false);
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
