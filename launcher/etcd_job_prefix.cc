#include "launcher/etcd_job_prefix.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "store/store_url.h"

namespace tessera::launcher {

absl::StatusOr<std::unique_ptr<store::EtcdStoreBackend>> ClaimEtcdPrefix(const std::string& url,
                                                                         auth::JobSecret secret,
                                                                         absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(auto parsed, store::ParseStoreUrl(url));
  TESSERA_ASSIGN_OR_RETURN(auto etcd, store::EtcdStoreBackend::Connect(parsed, std::move(secret)));
  auto keys = etcd->CountKeys(timeout);
  if (!keys.ok()) {
    return absl::Status(keys.status().code(),
                        absl::StrCat("cannot reach the rendezvous store ", etcd->target(), ": ",
                                     keys.status().message()));
  }
  if (*keys > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the rendezvous store ", etcd->target(), " already holds ", *keys,
        " keys of another job, or of an earlier run of this one that did not end on every "
        "node: give this job its own path (etcd://.../<job>) or delete them (Debian's etcd-client: "
        "ETCDCTL_API=3 etcdctl --endpoints ",
        absl::StrJoin(parsed.endpoints, ","), " del --prefix ", parsed.key_prefix, ")"));
  }
  return etcd;
}

}  // namespace tessera::launcher
