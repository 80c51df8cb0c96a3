#include "rref/class_registry.h"

#include "common/status.h"

namespace tessera::rref {

ClassRegistry::ClassRegistry(ClassRegistry&& other) {
  MutexLock lock(&other.mu_);
  classes_ = std::move(other.classes_);
  reserved_ = std::move(other.reserved_);
  names_by_type_ = std::move(other.names_by_type_);
}

void ClassRegistry::Reserve(const std::string& name, std::type_index type) {
  MutexLock lock(&mu_);
  if (name.empty()) throw StatusError(absl::InvalidArgumentError("class name is empty"));
  if (reserved_.count(name) > 0) {
    throw StatusError(absl::AlreadyExistsError("class '" + name + "' is already registered"));
  }
  auto named = names_by_type_.find(type);
  if (named != names_by_type_.end()) {
    throw StatusError(absl::AlreadyExistsError("class '" + name +
                                               "': its type is already "
                                               "registered as '" +
                                               named->second + "'"));
  }
  reserved_.emplace(name, type);
  names_by_type_.emplace(type, name);
}

void ClassRegistry::Publish(ClassInfo info) {
  const std::string name = info.name;
  auto published = std::make_shared<const ClassInfo>(std::move(info));
  {
    MutexLock lock(&mu_);
    classes_[name] = std::move(published);
  }
  waiters_.Notify(name);
}

Future<bool> ClassRegistry::WhenRegistered(const std::string& name, absl::Time until,
                                           DeadlineTimer& timer) {
  return waiters_.WhenRegistered(name, until, timer, [&] { return Find(name) != nullptr; });
}

const ClassInfo* ClassRegistry::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : it->second.get();
}

std::string ClassRegistry::NameOf(std::type_index type) const {
  MutexLock lock(&mu_);
  auto it = names_by_type_.find(type);
  return it == names_by_type_.end() ? "" : it->second;
}

}  // namespace tessera::rref
