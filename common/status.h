// Status helpers shared by every Tessera module.
//
// The error rule (README, "Errors"): user-facing calls that finish before
// they return throw StatusError, which carries an absl::Status unchanged
// (code and message naming what failed and where); calls that return a
// Future never throw, the future carries the status; programming errors
// (a name registered twice, a bad option) throw at once. Below the user
// API — agents, transports, codec, store — functions return absl::Status /
// absl::StatusOr<T>, and nothing throws across threads or the wire.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// An exception that carries an absl::Status; thrown only by user-facing
// convenience calls (e.g. RpcSync), never across threads or the wire.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Throws StatusError unless `status` is OK.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

// Runs `fn` and returns the status of the StatusError it threw, or OK: for
// code that branches on the failure of a throwing call.
template <typename Fn>
absl::Status StatusOf(Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const StatusError& e) {
    return e.status();
  }
}

// Prefixes a status's message with context, keeping its code.
inline absl::Status Annotate(const absl::Status& status,
                             const std::string& context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      context + ": " + std::string(status.message()));
}

}  // namespace tessera

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)

#define TESSERA_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::absl::Status tessera_status_ = (expr);     \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (0)

#define TESSERA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = *std::move(tmp)

#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(TESSERA_CONCAT(tessera_or_, __LINE__), lhs, expr)
