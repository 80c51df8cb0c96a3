#include "store/builtin_store_backend.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <type_traits>

#include "common/host_address.h"
#include "common/status.h"
#include "proto/store.grpc.pb.h"
#include "store/store_auth.h"
#include "store/store_channel.h"

namespace tessera::store {
namespace {

// Between attempts of a call.
constexpr absl::Duration kRetryPause = absl::Milliseconds(100);

}  // namespace

class BuiltinStoreBackend::Stub {
 public:
  Stub(const std::string& target, auth::JobSecret secret)
      : stub_(proto::Store::NewStub(grpc::CreateCustomChannel(
            target, grpc::InsecureChannelCredentials(), StoreChannelArguments()))),
        auth_(std::move(secret)) {}

  // A request id for a write that must not be applied twice: the same in
  // every attempt of the call, unique among this client's calls, and
  // unlike other clients' (a random start; see AppliedWrites).
  uint64_t NextRequestId() {
    uint64_t id;
    do {
      id = first_request_id_ + next_request_.fetch_add(1, std::memory_order_relaxed);
    } while (id == 0);  // 0: no id
    return id;
  }

  // One signed call (see Note [Store call authentication]) by `timeout`,
  // and the server's answer checked. A call that waits on the server
  // (Get, Wait) lets the server wait what is left of `timeout` less
  // `reply`. A call is repeated while it fails Unavailable: on a slow,
  // loaded machine the store's host may answer a keepalive ping late, gRPC
  // then drops the connection with every call on it ("keepalive watchdog
  // timeout"), and the caller should see time, not an error. Set, Get and
  // Wait are safe to repeat; Add, CompareSet and Delete carry a request id
  // the server applies once (AppliedWrites).
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (proto::Store::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                            Response*),
                    const char* method, Request request, Response* response, absl::Duration timeout,
                    absl::Duration reply = absl::ZeroDuration()) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      if constexpr (std::is_same_v<Request, proto::GetRequest> ||
                    std::is_same_v<Request, proto::WaitRequest>) {
        request.set_timeout_ms(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now() - reply)));
      }
      grpc::ClientContext context;
      context.set_wait_for_ready(true);
      context.set_deadline(absl::ToChronoTime(deadline));
      const std::string nonce = auth_.SignRequest(&context, method, request);
      absl::Status status = FromGrpcStatus((stub_.get()->*rpc)(&context, request, response));
      if (status.ok()) return auth_.CheckResponse(context, method, nonce, *response);
      if (!absl::IsUnavailable(status) || absl::Now() + kRetryPause >= deadline) {
        return status;
      }
      absl::SleepFor(kRetryPause);
    }
  }

 private:
  std::unique_ptr<proto::Store::Stub> stub_;
  const StoreAuth auth_;
  const uint64_t first_request_id_ = [] {
    std::random_device random;
    return (uint64_t{random()} << 32) | random();
  }();
  std::atomic<uint64_t> next_request_{0};
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
  proto::GetResponse response;
  auto status =
      stub_->Call(&proto::Store::Stub::Get, "Get", request, &response, wait + reply, reply);
  if (!status.ok()) return status;
  if (!response.found()) return std::nullopt;
  return response.value();
}

absl::Status BuiltinStoreBackend::CallWait(const std::vector<std::string>& keys,
                                           absl::Duration wait, absl::Duration reply,
                                           bool with_values, proto::WaitResponse* response) {
  proto::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_with_values(with_values);
  return stub_->Call(&proto::Store::Stub::Wait, "Wait", request, response, wait + reply, reply);
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
  request.set_request_id(stub_->NextRequestId());
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
  request.set_request_id(stub_->NextRequestId());
  proto::CompareSetResponse response;
  auto status =
      stub_->Call(&proto::Store::Stub::CompareSet, "CompareSet", request, &response, timeout);
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<bool> BuiltinStoreBackend::Delete(const std::string& key, absl::Duration timeout) {
  proto::DeleteRequest request;
  request.set_key(key);
  request.set_request_id(stub_->NextRequestId());
  proto::DeleteResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Delete, "Delete", request, &response, timeout);
  if (!status.ok()) return status;
  return response.deleted();
}

}  // namespace tessera::store
