// The keys of a job whose store is etcd (tessera-run --store etcd://...):
// the built-in store starts empty with every job, an etcd cluster outlives
// them, so node 0's launcher claims the job's key prefix before anything is
// written under it — refusing one that an earlier job left keys under,
// whose "open" and "ended" keys would mislead the nodes of this one — and
// deletes the keys once every node has ended (launcher.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "store/etcd_store_backend.h"

namespace tessera::launcher {

// Node 0's handle on the job's keys in etcd at `url`, if the prefix holds
// none; an error saying how to free it otherwise, or why etcd is out of
// reach within `timeout`.
absl::StatusOr<std::unique_ptr<store::EtcdStoreBackend>> ClaimEtcdPrefix(const std::string& url,
                                                                         auth::JobSecret secret,
                                                                         absl::Duration timeout);

}  // namespace tessera::launcher
