#include "launcher/job_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_address.h"
#include "common/status.h"
#include "launcher/etcd_job_prefix.h"

namespace tessera::launcher {

absl::StatusOr<JobStore> JobStore::Open(const LaunchOptions& options, auth::JobSecret secret) {
  JobStore job;
  job.secret_ = std::move(secret);
  job.port_ = options.master_port;
  const bool owner = options.node_rank == 0 && !options.join;
  if (!options.store_url.empty()) {
    if (owner) {
      TESSERA_ASSIGN_OR_RETURN(auto claimed, ClaimEtcdPrefix(options.store_url, job.secret_,
                                                             options.rendezvous_timeout));
      job.etcd_ = std::move(claimed);
      job.announcement_ = "rendezvous store: " + job.etcd_->target();
    }
  } else if (owner) {
    // Reached at --master_addr by the other nodes.
    auto server = options.standalone
                      ? store::StoreServer::Start("127.0.0.1", 0, job.secret_)
                      : store::StoreServer::StartForMaster(options.master_addr, job.port_,
                                                           job.secret_);
    if (!server.ok()) {
      return absl::Status(server.status().code(),
                          absl::StrCat("cannot host the rendezvous store at --master_addr ",
                                       options.master_addr, ": ", server.status().ToString()));
    }
    job.server_ = *std::move(server);
    job.port_ = job.server_->port();
    // Where more workers can join (--join --master_port; an elastic job's
    // own restarted ranks find it through their environment).
    job.announcement_ =
        absl::StrCat("rendezvous store at ", options.standalone ? "127.0.0.1" : options.master_addr,
                     ":", job.port_);
  }
  const std::string host = options.standalone ? "127.0.0.1" : options.master_addr;
  job.address_ = options.store_url.empty() ? JoinHostPort(host, job.port_) : options.store_url;
  if (auto usable = store::ConnectStore(job.address_, absl::Seconds(10), job.secret_);
      !usable.ok()) {
    // Only an etcd endpoint's name that does not resolve gets here.
    return absl::Status(usable.status().code(),
                        "cannot use the rendezvous store: " + usable.status().ToString());
  }
  return job;
}

std::unique_ptr<store::StoreClient> JobStore::Connect() const {
  return ValueOrThrow(store::ConnectStore(address_, absl::Seconds(10), secret_));
}

absl::Status JobStore::Clear(const std::string& keep_prefix, absl::Duration timeout) {
  if (server_ != nullptr) server_->Clear(keep_prefix);
  if (etcd_ == nullptr) return absl::OkStatus();
  return etcd_->Clear(keep_prefix, timeout);
}

}  // namespace tessera::launcher
