#include "store/store_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_address.h"
#include "proto/store.grpc.pb.h"
#include "store/store_auth.h"

namespace tessera::store {
namespace {

// Extra time the client waits beyond a server-side wait, for the reply.
constexpr absl::Duration kReplySlack = absl::Seconds(5);

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// Note [Store connections across a cut link]: a link cut for longer than
// a call's deadline, then healed, must cost the store's clients seconds,
// not minutes. Nothing resets a connection whose packets are dropped, so
// keepalive pings notice a silent one (kKeepalive, kKeepaliveTimeout; the
// server allows pings that often, store_server.cc), and reconnection is
// retried at least every second instead of gRPC's backoff of up to two
// minutes, which after a 25 s cut left the store unreachable long after
// the link was back.
constexpr int kKeepaliveMs = 5'000;
constexpr int kKeepaliveTimeoutMs = 5'000;

grpc::ChannelArguments ChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  return args;
}

}  // namespace

class StoreClient::Stub {
 public:
  Stub(const std::string& target, auth::JobSecret secret)
      : target_(target),
        stub_(proto::Store::NewStub(grpc::CreateCustomChannel(
            target, grpc::InsecureChannelCredentials(), ChannelArguments()))),
        auth_(std::move(secret)) {}

  // One signed call (Note [Store call authentication]): `what` names it in
  // errors, `timeout` bounds it, and the server's answer is checked.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (proto::Store::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                            Response*),
                    const char* method, const Request& request, Response* response,
                    absl::Duration timeout, const std::string& what) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    const std::string nonce = auth_.SignRequest(&context, method, request);
    absl::Status status = FromGrpc((stub_.get()->*rpc)(&context, request, response));
    if (status.ok()) status = auth_.CheckResponse(context, method, nonce, *response);
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrCat("store ", target_, ": ", what, ": ", status.message()));
  }

 private:
  const std::string target_;
  std::unique_ptr<proto::Store::Stub> stub_;
  const StoreAuth auth_;
};

StoreClient::StoreClient(const std::string& host, int port, absl::Duration default_timeout,
                         auth::JobSecret secret)
    : host_(host),
      target_(JoinHostPort(host, port)),
      default_timeout_(default_timeout),
      stub_(std::make_unique<Stub>(target_, std::move(secret))) {}

StoreClient::~StoreClient() = default;

absl::Status StoreClient::Set(const std::string& key, const std::string& value) {
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  return stub_->Call(&proto::Store::Stub::Set, "Set", request, &response, default_timeout_,
                     "set '" + key + "'");
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key) {
  return Get(key, default_timeout_);
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key, absl::Duration timeout) {
  proto::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::GetResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Get, "Get", request, &response,
                            timeout + kReplySlack, "get '" + key + "'");
  if (!status.ok()) return status;
  if (!response.found()) {
    return absl::DeadlineExceededError("store " + target_ + ": key '" + key +
                                       "' did not appear within " + absl::FormatDuration(timeout));
  }
  return response.value();
}

absl::StatusOr<std::vector<std::string>> StoreClient::WaitForKeys(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  proto::WaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::WaitResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Wait, "Wait", request, &response,
                            timeout + kReplySlack, "wait");
  if (!status.ok()) return status;
  return std::vector<std::string>(response.missing().begin(), response.missing().end());
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  auto missing = WaitForKeys(keys, timeout);
  if (!missing.ok()) return missing.status();
  if (missing->empty()) return absl::OkStatus();
  return absl::DeadlineExceededError("store " + target_ + ": keys still missing after " +
                                     absl::FormatDuration(timeout) + ": " +
                                     absl::StrJoin(*missing, ", "));
}

absl::StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  proto::AddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  proto::AddResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Add, "Add", request, &response, default_timeout_,
                            "add '" + key + "'");
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<std::string> StoreClient::CompareSet(const std::string& key,
                                                    const std::string& expected,
                                                    const std::string& desired) {
  proto::CompareSetRequest request;
  request.set_key(key);
  request.set_expected(expected);
  request.set_desired(desired);
  proto::CompareSetResponse response;
  auto status = stub_->Call(&proto::Store::Stub::CompareSet, "CompareSet", request, &response,
                            default_timeout_, "compare-set '" + key + "'");
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<bool> StoreClient::Delete(const std::string& key) {
  proto::DeleteRequest request;
  request.set_key(key);
  proto::DeleteResponse response;
  auto status = stub_->Call(&proto::Store::Stub::Delete, "Delete", request, &response,
                            default_timeout_, "delete '" + key + "'");
  if (!status.ok()) return status;
  return response.deleted();
}

}  // namespace tessera::store
