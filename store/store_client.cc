#include "store/store_client.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_load.h"
#include "common/status.h"
#include "store/builtin_store_backend.h"

namespace tessera::store {

StoreClient::StoreClient(const std::string& host, int port, absl::Duration default_timeout,
                         auth::JobSecret secret)
    : StoreClient(std::make_unique<BuiltinStoreBackend>(host, port, std::move(secret)), host,
                  default_timeout) {}

StoreClient::StoreClient(std::unique_ptr<StoreBackend> backend, std::string host,
                         absl::Duration default_timeout)
    : backend_(std::move(backend)), host_(std::move(host)), default_timeout_(default_timeout) {}

StoreClient::~StoreClient() = default;

absl::Status StoreClient::Annotated(const absl::Status& status, const std::string& what) const {
  if (status.ok()) return status;
  std::string load;
  if (absl::IsDeadlineExceeded(status)) {
    // See Note [Slow is not failed]: a deadline on a busy host says how busy.
    const std::string described = DescribeHostLoad();
    if (!described.empty()) load = absl::StrCat(" (", described, ")");
  }
  return absl::Status(status.code(),
                      absl::StrCat("store ", target(), ": ", what, ": ", status.message(), load));
}

absl::Status StoreClient::Set(const std::string& key, const std::string& value) {
  return Set(key, value, default_timeout_);
}

absl::Status StoreClient::Set(const std::string& key, const std::string& value,
                              absl::Duration timeout) {
  return Annotated(backend_->Set(key, value, timeout), "set '" + key + "'");
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key) {
  return Get(key, default_timeout_);
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key, absl::Duration timeout) {
  auto value = backend_->Get(key, timeout, default_timeout_);
  if (!value.ok()) return Annotated(value.status(), "get '" + key + "'");
  if (!value->has_value()) {
    return absl::DeadlineExceededError("store " + target() + ": key '" + key +
                                       "' did not appear within " + absl::FormatDuration(timeout));
  }
  return **std::move(value);
}

absl::StatusOr<std::vector<std::string>> StoreClient::WaitForKeys(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  auto missing = backend_->WaitForKeys(keys, timeout, default_timeout_);
  if (!missing.ok()) return Annotated(missing.status(), "wait");
  return missing;
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(auto missing, WaitForKeys(keys, timeout));
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError("store " + target() + ": keys still missing after " +
                                     absl::FormatDuration(timeout) + ": " +
                                     absl::StrJoin(missing, ", "));
}

absl::StatusOr<std::map<std::string, std::string>> StoreClient::GetMany(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  auto values = backend_->GetMany(keys, timeout, default_timeout_);
  if (!values.ok()) return Annotated(values.status(), "read " + std::to_string(keys.size()) + " keys");
  return values;
}

absl::StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  auto value = backend_->Add(key, delta, default_timeout_);
  if (!value.ok()) return Annotated(value.status(), "add '" + key + "'");
  return value;
}

absl::StatusOr<std::string> StoreClient::CompareSet(const std::string& key,
                                                    const std::string& expected,
                                                    const std::string& desired) {
  auto value = backend_->CompareSet(key, expected, desired, default_timeout_);
  if (!value.ok()) return Annotated(value.status(), "compare-set '" + key + "'");
  return value;
}

absl::StatusOr<bool> StoreClient::Delete(const std::string& key) {
  auto deleted = backend_->Delete(key, default_timeout_);
  if (!deleted.ok()) return Annotated(deleted.status(), "delete '" + key + "'");
  return deleted;
}

}  // namespace tessera::store
