// ClassRegistry: C++ classes whose objects can be created on another worker
// with remote() and used there through their RRef.
//
//   ClassRegistry classes;
//   classes.Class<ParameterServer>("ParameterServer")
//       .Constructor<int64_t>()
//       .Method("get_weights", &ParameterServer::GetWeights)
//       .Method("update", &ParameterServer::Update);
//
// Objects never leave their owner: only method results travel. Methods are
// type-checked like registered functions (see rpc/registry.h), may take a
// leading `rpc::CallContext&`, and may return Future<T> to finish later.
//
// Registering a name or a type twice throws StatusError (a programming
// error). Classes may be registered before the runtime starts or while it
// runs: a class becomes visible to peers whole, when the builder expression
// ends (its last .Method(...)).
//
// Thread-safety: thread-safe. Methods of one object may run concurrently:
// objects guard their own state.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/registration_waiters.h"
#include "common/status.h"
#include "rpc/function_adapter.h"
#include "rpc/registry.h"

namespace tessera::rref {

struct ClassInfo {
  std::string name;
  std::string constructor_signature;
  std::function<absl::StatusOr<std::shared_ptr<void>>(std::vector<c10::IValue>&)> construct;
  rpc::Registry methods;  // invoked with CallContext::self = the object
  rpc::AllowList allowed;  // who may construct it or call its methods
};

namespace class_internal {

template <typename M>
struct MethodAdapter;

#define TESSERA_METHOD_ADAPTER(QUALIFIER)                                              \
  template <typename T, typename R, typename... A>                                     \
  struct MethodAdapter<R (T::*)(A...) QUALIFIER> {                                     \
    static auto Bind(R (T::*m)(A...) QUALIFIER) {                                      \
      return [m](rpc::CallContext& ctx, std::decay_t<A>... args) -> R {                \
        return (static_cast<T*>(ctx.self)->*m)(std::move(args)...);                    \
      };                                                                               \
    }                                                                                  \
  };                                                                                   \
  template <typename T, typename R, typename... A>                                     \
  struct MethodAdapter<R (T::*)(rpc::CallContext&, A...) QUALIFIER> {                  \
    static auto Bind(R (T::*m)(rpc::CallContext&, A...) QUALIFIER) {                   \
      return [m](rpc::CallContext& ctx, std::decay_t<A>... args) -> R {                \
        return (static_cast<T*>(ctx.self)->*m)(ctx, std::move(args)...);               \
      };                                                                               \
    }                                                                                  \
  };
TESSERA_METHOD_ADAPTER()
TESSERA_METHOD_ADAPTER(const)
#undef TESSERA_METHOD_ADAPTER

}  // namespace class_internal

class ClassRegistry;

template <typename T>
class ClassBuilder {
 public:
  ClassBuilder(ClassRegistry* registry, std::string name);
  // Publishes the class: peers may construct it from now on.
  ~ClassBuilder();
  ClassBuilder(const ClassBuilder&) = delete;
  ClassBuilder& operator=(const ClassBuilder&) = delete;

  // Objects are made with `new T(args...)`.
  template <typename... Args>
  ClassBuilder& Constructor() {
    return Factory<Args...>(
        [](Args... args) { return std::make_shared<T>(std::move(args)...); });
  }

  // Objects are made by `make(args...)` (a std::shared_ptr<T>): for state
  // the wire arguments cannot carry, e.g. the models a pipeline stage may
  // build, captured by the factory.
  template <typename... Args, typename Make>
  ClassBuilder& Factory(Make make) {
    const std::string name = info_.name;
    auto probe = [](Args...) {};
    info_.constructor_signature = rpc::Signature<decltype(probe)>();
    const std::string signature = info_.constructor_signature;
    info_.construct = [name, signature, make](
                          std::vector<c10::IValue>& args) -> absl::StatusOr<std::shared_ptr<void>> {
      constexpr size_t kArity = sizeof...(Args);
      using Params = std::tuple<Args...>;
      auto mismatch = [&] {
        std::vector<std::string> got;
        for (const auto& arg : args) got.push_back(rpc::DescribeIValue(arg));
        return absl::InvalidArgumentError("constructor of '" + name + "' expects " +
                                          signature + " but got (" +
                                          absl::StrJoin(got, ", ") + ")");
      };
      if (args.size() != kArity) return mismatch();
      auto converted = rpc::adapter_internal::ConvertArgs<Params>(
          args, std::make_index_sequence<kArity>());
      const bool all_ok = std::apply(
          [](const auto&... c) { return (true && ... && c.has_value()); }, converted);
      if (!all_ok) return mismatch();
      try {
        return std::apply(
            [&make](auto&... c) -> std::shared_ptr<void> {
              return std::shared_ptr<T>(make(std::move(*c)...));
            },
            converted);
      } catch (const StatusError& e) {
        return Annotate(e.status(), "constructor of '" + name + "' raised");  // its code stands
      } catch (const std::exception& e) {
        return absl::UnknownError("constructor of '" + name + "' raised: " + e.what());
      }
    };
    return *this;
  }

  // Only these workers may create objects of the class or call their
  // methods (rpc/allow_list.h; default: all).
  ClassBuilder& AllowCallers(rpc::AllowList allowed) {
    info_.allowed = std::move(allowed);
    return *this;
  }

  template <typename M>
  ClassBuilder& Method(const std::string& method, M member) {
    info_.methods.Register(method, class_internal::MethodAdapter<M>::Bind(member));
    return *this;
  }

 private:
  ClassRegistry* registry_;
  ClassInfo info_;
};

class ClassRegistry {
 public:
  ClassRegistry() = default;
  ClassRegistry(ClassRegistry&& other);

  // Starts registering T under `name`; names and types must be unique
  // (else StatusError, AlreadyExists).
  template <typename T>
  ClassBuilder<T> Class(const std::string& name) {
    Reserve(name, std::type_index(typeid(T)));
    return ClassBuilder<T>(this, name);
  }

  // nullptr when no class of that name is (fully) registered.
  const ClassInfo* Find(const std::string& name) const;
  // Completes with true when `name` is published (at once if it is), or
  // with false at `until` (see Note [Late registration], rpc/runtime.h).
  Future<bool> WhenRegistered(const std::string& name, absl::Time until, DeadlineTimer& timer);

  // The registered name of T, or "" if T was not registered.
  template <typename T>
  std::string NameOf() const {
    return NameOf(std::type_index(typeid(T)));
  }

 private:
  template <typename T>
  friend class ClassBuilder;
  void Reserve(const std::string& name, std::type_index type);
  void Publish(ClassInfo info);
  std::string NameOf(std::type_index type) const;

  mutable Mutex mu_;
  // Published classes; never removed, so pointers handed out stay valid.
  std::map<std::string, std::shared_ptr<const ClassInfo>> classes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::type_index> reserved_ ABSL_GUARDED_BY(mu_);
  std::map<std::type_index, std::string> names_by_type_ ABSL_GUARDED_BY(mu_);
  RegistrationWaiters waiters_;
};

template <typename T>
ClassBuilder<T>::ClassBuilder(ClassRegistry* registry, std::string name) : registry_(registry) {
  info_.name = std::move(name);
}

template <typename T>
ClassBuilder<T>::~ClassBuilder() {
  registry_->Publish(std::move(info_));
}

}  // namespace tessera::rref
