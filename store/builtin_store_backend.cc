#include "store/builtin_store_backend.h"

#include <grpcpp/grpcpp.h>

#include "common/host_address.h"
#include "common/status.h"
#include "proto/store.grpc.pb.h"
#include "store/store_auth.h"
#include "store/store_channel.h"

namespace tessera::store {
class BuiltinStoreBackend::Stub {
 public:
  Stub(const std::string& target, auth::JobSecret secret)
      : stub_(proto::Store::NewStub(grpc::CreateCustomChannel(
            target, grpc::InsecureChannelCredentials(), StoreChannelArguments()))),
        auth_(std::move(secret)) {}

  // One signed call (see Note [Store call authentication]): `timeout` bounds
  // it, and the server's answer is checked.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (proto::Store::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                            Response*),
                    const char* method, const Request& request, Response* response,
                    absl::Duration timeout) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    const std::string nonce = auth_.SignRequest(&context, method, request);
    absl::Status status = FromGrpcStatus((stub_.get()->*rpc)(&context, request, response));
    if (status.ok()) status = auth_.CheckResponse(context, method, nonce, *response);
    return status;
  }

 private:
  std::unique_ptr<proto::Store::Stub> stub_;
  const StoreAuth auth_;
};

BuiltinStoreBackend::BuiltinStoreBackend(const std::string& host, int port, auth::JobSecret secret)
    : target_(JoinHostPort(host, port)),
      stub_(std::make_unique<Stub>(target_, std::move(secret))) {}

BuiltinStoreBackend::~BuiltinStoreBackend() = default;

absl::Status BuiltinStoreBackend::Set(const std::string& key, const std::string& value,
                                      absl::Duration timeout) {
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  return stub_->Call(&proto::Store::Stub::Set, "Set", request, &response, timeout);
}

absl::StatusOr<std::optional<std::string>> BuiltinStoreBackend::Get(const std::string& key,
                                                                    absl::Duration wait,
                                                                    absl::Duration reply) {
  proto::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
  proto::GetResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Get, "Get", request, &response, wait + reply);
  if (!status.ok()) return status;
  if (!response.found()) return std::nullopt;
  return response.value();
}

absl::Status BuiltinStoreBackend::CallWait(const std::vector<std::string>& keys,
                                           absl::Duration wait, absl::Duration reply,
                                           bool with_values, proto::WaitResponse* response) {
  proto::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
  request.set_with_values(with_values);
  return stub_->Call(&proto::Store::Stub::Wait, "Wait", request, response, wait + reply);
}

absl::StatusOr<std::vector<std::string>> BuiltinStoreBackend::WaitForKeys(
    const std::vector<std::string>& keys, absl::Duration wait, absl::Duration reply) {
  proto::WaitResponse response;
  TESSERA_RETURN_IF_ERROR(CallWait(keys, wait, reply, /*with_values=*/false, &response));
  return std::vector<std::string>(response.missing().begin(), response.missing().end());
}

absl::StatusOr<std::map<std::string, std::string>> BuiltinStoreBackend::GetMany(
    const std::vector<std::string>& keys, absl::Duration wait, absl::Duration reply) {
  proto::WaitResponse response;
  TESSERA_RETURN_IF_ERROR(CallWait(keys, wait, reply, /*with_values=*/true, &response));
  std::map<std::string, std::string> values;
  for (proto::KeyValue& entry : *response.mutable_present()) {
    values.emplace(entry.key(), std::move(*entry.mutable_value()));
  }
  return values;
}

absl::StatusOr<int64_t> BuiltinStoreBackend::Add(const std::string& key, int64_t delta,
                                                 absl::Duration timeout) {
  proto::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  proto::AddResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Add, "Add", request, &response, timeout);
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<std::string> BuiltinStoreBackend::CompareSet(const std::string& key,
                                                            const std::string& expected,
                                                            const std::string& desired,
                                                            absl::Duration timeout) {
  proto::CompareSetRequest request;
  request.set_key(key);
  request.set_expected(expected);
  request.set_desired(desired);
  proto::CompareSetResponse response;
  auto status =
      stub_->Call(&proto::Store::Stub::CompareSet, "CompareSet", request, &response, timeout);
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<bool> BuiltinStoreBackend::Delete(const std::string& key, absl::Duration timeout) {
  proto::DeleteRequest request;
  request.set_key(key);
  proto::DeleteResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Delete, "Delete", request, &response, timeout);
  if (!status.ok()) return status;
  return response.deleted();
}

}  // namespace tessera::store
