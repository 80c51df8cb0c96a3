#include "store/store_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_join.h"
#include "proto/store.grpc.pb.h"

namespace tessera::store {
namespace {

// Extra time the client waits beyond a server-side wait, for the reply.
constexpr absl::Duration kReplySlack = absl::Seconds(5);

absl::Status FromGrpc(const grpc::Status& status, const std::string& what,
                      const std::string& target) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      "store " + target + ": " + what + ": " +
                          status.error_message());
}

}  // namespace

class StoreClient::Stub {
 public:
  explicit Stub(const std::string& target)
      : stub_(proto::Store::NewStub(grpc::CreateChannel(
            target, grpc::InsecureChannelCredentials()))) {}
  proto::Store::Stub* get() { return stub_.get(); }

 private:
  std::unique_ptr<proto::Store::Stub> stub_;
};

StoreClient::StoreClient(const std::string& host, int port,
                         absl::Duration default_timeout)
    : target_(host + ":" + std::to_string(port)),
      default_timeout_(default_timeout),
      stub_(std::make_unique<Stub>(target_)) {}

StoreClient::~StoreClient() = default;

namespace {
void Prepare(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_wait_for_ready(true);
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}
}  // namespace

absl::Status StoreClient::Set(const std::string& key,
                              const std::string& value) {
  grpc::ClientContext context;
  Prepare(&context, default_timeout_);
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  return FromGrpc(stub_->get()->Set(&context, request, &response),
                  "set '" + key + "'", target_);
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key) {
  return Get(key, default_timeout_);
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key,
                                             absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout + kReplySlack);
  proto::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::GetResponse response;
  auto status = FromGrpc(stub_->get()->Get(&context, request, &response),
                         "get '" + key + "'", target_);
  if (!status.ok()) return status;
  if (!response.found()) {
    return absl::DeadlineExceededError("store " + target_ + ": key '" + key +
                                       "' did not appear within " +
                                       absl::FormatDuration(timeout));
  }
  return response.value();
}

absl::StatusOr<std::vector<std::string>> StoreClient::WaitForKeys(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout + kReplySlack);
  proto::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::WaitResponse response;
  auto status = FromGrpc(stub_->get()->Wait(&context, request, &response),
                         "wait", target_);
  if (!status.ok()) return status;
  return std::vector<std::string>(response.missing().begin(),
                                  response.missing().end());
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys,
                               absl::Duration timeout) {
  auto missing = WaitForKeys(keys, timeout);
  if (!missing.ok()) return missing.status();
  if (missing->empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      "store " + target_ + ": keys still missing after " +
      absl::FormatDuration(timeout) + ": " + absl::StrJoin(*missing, ", "));
}

absl::StatusOr<int64_t> StoreClient::Add(const std::string& key,
                                         int64_t delta) {
  grpc::ClientContext context;
  Prepare(&context, default_timeout_);
  proto::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  proto::AddResponse response;
  auto status = FromGrpc(stub_->get()->Add(&context, request, &response),
                         "add '" + key + "'", target_);
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<std::string> StoreClient::CompareSet(
    const std::string& key, const std::string& expected,
    const std::string& desired) {
  grpc::ClientContext context;
  Prepare(&context, default_timeout_);
  proto::CompareSetRequest request;
  request.set_key(key);
  request.set_expected(expected);
  request.set_desired(desired);
  proto::CompareSetResponse response;
  auto status =
      FromGrpc(stub_->get()->CompareSet(&context, request, &response),
               "compare-set '" + key + "'", target_);
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<bool> StoreClient::Delete(const std::string& key) {
  grpc::ClientContext context;
  Prepare(&context, default_timeout_);
  proto::DeleteRequest request;
  request.set_key(key);
  proto::DeleteResponse response;
  auto status = FromGrpc(stub_->get()->Delete(&context, request, &response),
                         "delete '" + key + "'", target_);
  if (!status.ok()) return status;
  return response.deleted();
}

}  // namespace tessera::store
