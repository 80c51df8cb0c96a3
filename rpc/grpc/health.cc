#include "rpc/grpc/health.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::rpc {
namespace {

constexpr char kServiceField = 0x0a;  // field 1, length-delimited
constexpr char kStatusField = 0x08;   // field 1, varint
enum ServingStatus : char { kServing = 1, kNotServing = 2 };

// The `service` of a HealthCheckRequest (empty when absent).
absl::StatusOr<std::string> ServiceName(const grpc::ByteBuffer& request) {
  std::vector<grpc::Slice> slices;
  if (!request.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable health request");
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (bytes.empty()) return std::string();
  // Field 1's key, its length as a varint, then exactly that many bytes.
  const absl::Status malformed = absl::InvalidArgumentError("malformed HealthCheckRequest");
  if (bytes[0] != kServiceField) return malformed;
  size_t length = 0, pos = 1;
  for (int shift = 0; pos < bytes.size() && shift < 35; shift += 7) {
    const auto byte = static_cast<unsigned char>(bytes[pos++]);
    length |= size_t{byte & 0x7fu} << shift;
    if ((byte & 0x80u) == 0) {
      if (length != bytes.size() - pos) return malformed;
      return bytes.substr(pos);
    }
  }
  return malformed;
}

}  // namespace

HealthMethod HealthMethodOf(const std::string& method) {
  if (method == "/grpc.health.v1.Health/Check") return HealthMethod::kCheck;
  if (method == "/grpc.health.v1.Health/Watch") return HealthMethod::kWatch;
  return HealthMethod::kNone;
}

absl::StatusOr<grpc::ByteBuffer> HealthResponse(const grpc::ByteBuffer& request, bool serving) {
  TESSERA_ASSIGN_OR_RETURN(auto service, ServiceName(request));
  if (!service.empty() && service != "tessera.proto.Worker") {
    return absl::NotFoundError(absl::StrCat("unknown service '", service, "'"));
  }
  const char response[] = {kStatusField, serving ? kServing : kNotServing};
  grpc::Slice slice(response, sizeof(response));
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace tessera::rpc
