#include "store/store_auth.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "rpc/auth/mac.h"

namespace tessera::store {
namespace {

constexpr char kProtocol[] = "tessera-store-v1";
constexpr size_t kNonceBytes = 16;
// Binary metadata keys must end in "-bin".
constexpr char kNonceKey[] = "tessera-store-nonce-bin";
constexpr char kRequestMacKey[] = "tessera-store-request-mac-bin";
constexpr char kResponseMacKey[] = "tessera-store-response-mac-bin";

// The same bytes on both sides: the server MACs the message it parsed, not
// the bytes it received, so the encoding must not vary.
std::string Bytes(const google::protobuf::Message& message) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

// The only value of `key` in `metadata`, or empty.
template <typename Multimap>
std::string_view OnlyValue(const Multimap& metadata, const char* key) {
  auto [first, last] = metadata.equal_range(key);
  if (first == last || std::next(first) != last) return {};
  return std::string_view(first->second.data(), first->second.size());
}

}  // namespace

std::string StoreAuth::RequestMac(std::string_view method, std::string_view nonce,
                                  const google::protobuf::Message& request) const {
  return rpc::Mac(secret_, {kProtocol, "request", method, nonce, Bytes(request)});
}

std::string StoreAuth::ResponseMac(std::string_view method, std::string_view nonce,
                                   const google::protobuf::Message& response) const {
  return rpc::Mac(secret_, {kProtocol, "response", method, nonce, Bytes(response)});
}

std::string StoreAuth::SignRequest(grpc::ClientContext* context, std::string_view method,
                                   const google::protobuf::Message& request) const {
  if (!enabled()) return {};
  std::string nonce = rpc::RandomBytes(kNonceBytes);
  context->AddMetadata(kNonceKey, nonce);
  context->AddMetadata(kRequestMacKey, RequestMac(method, nonce, request));
  return nonce;
}

absl::Status StoreAuth::CheckResponse(const grpc::ClientContext& context,
                                      std::string_view method, const std::string& nonce,
                                      const google::protobuf::Message& response) const {
  if (!enabled()) return absl::OkStatus();
  const std::string_view mac = OnlyValue(context.GetServerTrailingMetadata(), kResponseMacKey);
  if (!rpc::SameMac(mac, ResponseMac(method, nonce, response))) {
    return absl::UnauthenticatedError(
        "the answer is not from a store that knows this job's secret (another job's store at "
        "this address, or its TESSERA_JOB_SECRET differs)");
  }
  return absl::OkStatus();
}

grpc::Status StoreAuth::CheckRequest(const grpc::ServerContext& context, std::string_view method,
                                     const google::protobuf::Message& request) const {
  if (!enabled()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const std::string_view nonce = OnlyValue(metadata, kNonceKey);
  const std::string_view mac = OnlyValue(metadata, kRequestMacKey);
  if (nonce.size() != kNonceBytes || !rpc::SameMac(mac, RequestMac(method, nonce, request))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the store refused a caller that did not prove it knows the job secret "
                        "(TESSERA_JOB_SECRET missing, or not the one the store was started with)");
  }
  return grpc::Status::OK;
}

void StoreAuth::SignResponse(grpc::ServerContext* context, std::string_view method,
                             const google::protobuf::Message& response) const {
  if (!enabled()) return;
  const std::string_view nonce = OnlyValue(context->client_metadata(), kNonceKey);
  context->AddTrailingMetadata(kResponseMacKey, ResponseMac(method, nonce, response));
}

}  // namespace tessera::store
