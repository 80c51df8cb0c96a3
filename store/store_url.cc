#include "store/store_url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/host_address.h"
#include "common/status.h"
#include "store/builtin_store_backend.h"
#include "store/etcd_store_backend.h"

namespace tessera::store {
namespace {

constexpr char kEtcdScheme[] = "etcd://";

bool IsJobName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<StoreUrl> ParseStoreUrl(const std::string& url) {
  StoreUrl parsed;
  std::string rest = url;
  std::string path;
  if (absl::StartsWith(url, kEtcdScheme)) {
    parsed.etcd = true;
    rest = url.substr(sizeof(kEtcdScheme) - 1);
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
      path = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (!path.empty() && path.back() == '/') path.pop_back();
      if (!IsJobName(path)) {
        return absl::InvalidArgumentError(
            absl::StrCat("store '", url,
                         "': the path after the endpoints names the job's keys, as letters, "
                         "digits, '-', '_' or '.' (etcd://h1:2379,h2:2379/my-job)"));
      }
    }
  } else if (absl::StrContains(url, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store '", url, "': give host:port (the built-in store) or etcd://host:port,..."));
  }
  for (const std::string& endpoint :
       std::vector<std::string>(absl::StrSplit(rest, ',', absl::SkipEmpty()))) {
    std::string host;
    int port = 0;
    if (!SplitHostPort(endpoint, &host, &port) || host.empty() || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("store '", url, "': endpoint '", endpoint, "' is not host:port"));
    }
    if (parsed.endpoints.empty()) {
      parsed.host = host;
      parsed.port = port;
    }
    parsed.endpoints.push_back(endpoint);
  }
  if (parsed.endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("store '", url, "': no endpoint given"));
  }
  if (!parsed.etcd && parsed.endpoints.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store '", url, "': the built-in store has one endpoint (several are for etcd://)"));
  }
  if (parsed.etcd)
    parsed.key_prefix = absl::StrCat("/tessera/", path.empty() ? "default" : path, "/");
  return parsed;
}

absl::StatusOr<std::unique_ptr<StoreClient>> ConnectStore(const std::string& url,
                                                          absl::Duration default_timeout,
                                                          auth::JobSecret secret) {
  TESSERA_ASSIGN_OR_RETURN(auto parsed, ParseStoreUrl(url));
  if (!parsed.etcd) {
    return std::make_unique<StoreClient>(parsed.host, parsed.port, default_timeout,
                                         std::move(secret));
  }
  TESSERA_ASSIGN_OR_RETURN(auto etcd, EtcdStoreBackend::Connect(parsed, std::move(secret)));
  return std::make_unique<StoreClient>(std::move(etcd), parsed.host, default_timeout);
}

}  // namespace tessera::store
