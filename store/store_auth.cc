#include "store/store_auth.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "auth/mac.h"

namespace tessera::store {
namespace {

constexpr char kProtocol[] = "tessera-store-v1";
constexpr size_t kSessionBytes = 16;
constexpr size_t kNonceBytes = kSessionBytes + 8;  // session id, call number
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

StoreAuth::StoreAuth(auth::JobSecret secret)
    : secret_(std::move(secret)),
      session_(secret_.empty() ? std::string() : auth::RandomBytes(kSessionBytes)) {}

std::string StoreAuth::RequestMac(std::string_view method, std::string_view nonce,
                                  const google::protobuf::Message& request) const {
  return auth::Mac(secret_, {kProtocol, "request", method, nonce, Bytes(request)});
}

std::string StoreAuth::ResponseMac(std::string_view method, std::string_view nonce,
                                   const google::protobuf::Message& response) const {
  return auth::Mac(secret_, {kProtocol, "response", method, nonce, Bytes(response)});
}

StoreAuth::Signature StoreAuth::Sign(std::string_view method,
                                     const google::protobuf::Message& request) const {
  if (!enabled()) return {};
  std::string nonce = session_;
  const uint64_t number = ++calls_;
  for (int shift = 0; shift < 64; shift += 8) nonce.push_back(static_cast<char>(number >> shift));
  std::string mac = RequestMac(method, nonce, request);
  return {std::move(nonce), std::move(mac)};
}

void StoreAuth::Attach(const Signature& signature, grpc::ClientContext* context) {
  if (signature.nonce.empty()) return;
  context->AddMetadata(kNonceKey, signature.nonce);
  context->AddMetadata(kRequestMacKey, signature.mac);
}

std::string StoreAuth::SignRequest(grpc::ClientContext* context, std::string_view method,
                                   const google::protobuf::Message& request) const {
  Signature signature = Sign(method, request);
  Attach(signature, context);
  return std::move(signature.nonce);
}

absl::Status StoreAuth::CheckResponse(const grpc::ClientContext& context,
                                      std::string_view method, const std::string& nonce,
                                      const google::protobuf::Message& response) const {
  if (!enabled()) return absl::OkStatus();
  const std::string_view mac = OnlyValue(context.GetServerTrailingMetadata(), kResponseMacKey);
  if (!auth::SameMac(mac, ResponseMac(method, nonce, response))) {
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
  return CheckRequest(OnlyValue(metadata, kNonceKey), OnlyValue(metadata, kRequestMacKey), method,
                      request);
}

grpc::Status StoreAuth::CheckRequest(std::string_view nonce, std::string_view mac,
                                     std::string_view method,
                                     const google::protobuf::Message& request) const {
  if (!enabled()) return grpc::Status::OK;
  if (nonce.size() != kNonceBytes || !auth::SameMac(mac, RequestMac(method, nonce, request))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the store refused a caller that did not prove it knows the job secret "
                        "(TESSERA_JOB_SECRET missing, or not the one the store was started with)");
  }
  // Only now, with the MAC checked: strangers cannot fill windows_.
  uint64_t number = 0;
  for (size_t i = 0; i < 8; ++i) {
    number |= static_cast<uint64_t>(static_cast<unsigned char>(nonce[kSessionBytes + i])) << (8 * i);
  }
  MutexLock lock(&mu_);
  if (!windows_[std::string(nonce.substr(0, kSessionBytes))].Accept(number)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the store refused a replayed request (this call number of this client "
                        "was served already)");
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
