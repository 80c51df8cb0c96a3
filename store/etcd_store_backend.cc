#include "store/etcd_store_backend.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "auth/mac.h"
#include "common/host_address.h"
#include "common/status.h"
#include "proto/etcd_kv.grpc.pb.h"
#include "store/store_channel.h"

namespace tessera::store {
namespace {

namespace etcd = ::etcdserverpb;

// Between attempts after an Unavailable (an election, a member gone).
constexpr absl::Duration kRetryPause = absl::Milliseconds(100);
// etcd's default transaction holds at most 128 operations (--max-txn-ops).
constexpr size_t kKeysPerRead = 100;
constexpr size_t kMacBytes = 32;

// etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time)
// and any ping on a connection without a call; the health-check stream gRPC
// keeps open to every member (the service config below) is such a call, so
// a member that goes silent is noticed within kKeepalive + kKeepaliveTimeout
// and dropped from the round robin (see Note [The store on etcd]).
constexpr int kKeepaliveMs = 10'000;
constexpr int kKeepaliveTimeoutMs = 5'000;
constexpr char kServiceConfig[] =
    R"({"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}})";

grpc::ChannelArguments EtcdChannelArguments() {
  grpc::ChannelArguments args = StoreChannelArguments();
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetServiceConfigJSON(kServiceConfig);
  return args;
}

// The end of the range of keys starting with `prefix` (etcd's convention).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// gRPC's target for every member's address: "ipv4:a:p,b:p" (or ipv6:),
// which round_robin spreads calls over.
absl::StatusOr<std::string> GrpcTarget(const StoreUrl& url) {
  std::vector<std::vector<std::string>> resolved;
  for (const std::string& endpoint : url.endpoints) {
    std::string host;
    int port = 0;
    SplitHostPort(endpoint, &host, &port);
    auto addresses = ResolveHost(host);
    if (!addresses.ok()) {
      return absl::Status(addresses.status().code(),
                          absl::StrCat("etcd endpoint '", endpoint,
                                       "' does not resolve: ", addresses.status().message()));
    }
    std::vector<std::string> with_port;
    for (const std::string& address : *addresses) with_port.push_back(JoinHostPort(address, port));
    resolved.push_back(std::move(with_port));
  }
  for (const bool v4 : {true, false}) {
    std::vector<std::string> chosen;
    for (const auto& addresses : resolved) {
      auto it = std::find_if(addresses.begin(), addresses.end(), [v4](const std::string& a) {
        return (a.front() != '[') == v4;  // JoinHostPort brackets IPv6
      });
      if (it != addresses.end()) chosen.push_back(*it);
    }
    if (chosen.size() == resolved.size()) {
      return absl::StrCat(v4 ? "ipv4:" : "ipv6:", absl::StrJoin(chosen, ","));
    }
  }
  return absl::InvalidArgumentError(
      "the etcd endpoints resolve to a mix of IPv4-only and IPv6-only hosts; give addresses of "
      "one family");
}

etcd::RequestOp RangeOp(const std::string& key) {
  etcd::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

etcd::RequestOp PutOp(const std::string& key, const std::string& value) {
  etcd::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  return op;
}

}  // namespace

class EtcdStoreBackend::Stub {
 public:
  explicit Stub(const std::string& grpc_target)
      : channel_(grpc::CreateCustomChannel(grpc_target, grpc::InsecureChannelCredentials(),
                                           EtcdChannelArguments())),
        kv_(etcd::KV::NewStub(channel_)),
        watch_(etcd::Watch::NewStub(channel_)) {}

  // One KV call by `deadline`, tried again on another member while it
  // fails Unavailable — if `retry` says the call is safe to repeat.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (etcd::KV::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                        Response*),
                    const Request& request, Response* response, absl::Time deadline,
                    bool retry = true) {
    while (true) {
      grpc::ClientContext context;
      context.set_wait_for_ready(true);
      context.set_deadline(absl::ToChronoTime(deadline));
      const absl::Status status = FromGrpcStatus((kv_.get()->*rpc)(&context, request, response));
      if (status.ok() || !retry || status.code() != absl::StatusCode::kUnavailable) {
        return Explained(status);
      }
      // Unavailable until the deadline (etcd's own "request timed out" on a
      // slow machine, or no majority): what ran out is the caller's time.
      if (absl::Now() + kRetryPause >= deadline) {
        return Explained(absl::DeadlineExceededError(status.message()));
      }
      absl::SleepFor(kRetryPause);
    }
  }

  // Watches `keys` from `revision` until each was put or `deadline`:
  // the stored values of those put. Returns early if the stream breaks
  // (a member lost): the caller reads again.
  std::map<std::string, std::string> Watch(std::set<std::string> keys, int64_t revision,
                                           absl::Time deadline) {
    std::map<std::string, std::string> put;
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(absl::ToChronoTime(deadline));
    auto stream = watch_->Watch(&context);
    bool writing = true;
    for (const std::string& key : keys) {
      etcd::WatchRequest request;
      request.mutable_create_request()->set_key(key);
      request.mutable_create_request()->set_start_revision(revision);
      if (!(writing = stream->Write(request))) break;
    }
    etcd::WatchResponse response;
    while (writing && !keys.empty() && stream->Read(&response) && !response.canceled()) {
      for (const etcd::Event& event : response.events()) {
        if (event.type() == etcd::Event::PUT && keys.erase(event.kv().key()) > 0) {
          put[event.kv().key()] = event.kv().value();
        }
      }
    }
    context.TryCancel();
    (void)stream->Finish();
    return put;
  }

 private:
  static absl::Status Explained(const absl::Status& status) {
    if (status.code() != absl::StatusCode::kDeadlineExceeded) return status;
    return absl::DeadlineExceededError(
        absl::StrCat("no etcd member answered in time (", status.message(),
                     "): are a majority of the members up and reachable?"));
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcd::KV::Stub> kv_;
  std::unique_ptr<etcd::Watch::Stub> watch_;
};

absl::StatusOr<std::unique_ptr<EtcdStoreBackend>> EtcdStoreBackend::Connect(
    const StoreUrl& url, auth::JobSecret secret) {
  TESSERA_ASSIGN_OR_RETURN(auto grpc_target, GrpcTarget(url));
  std::string target = absl::StrCat("etcd://", absl::StrJoin(url.endpoints, ","), url.key_prefix);
  return std::unique_ptr<EtcdStoreBackend>(new EtcdStoreBackend(
      std::move(target), url.key_prefix, std::move(grpc_target), std::move(secret)));
}

EtcdStoreBackend::EtcdStoreBackend(std::string target, std::string key_prefix,
                                   std::string grpc_target, auth::JobSecret secret)
    : target_(std::move(target)),
      key_prefix_(std::move(key_prefix)),
      secret_(std::move(secret)),
      stub_(std::make_unique<Stub>(grpc_target)) {}

EtcdStoreBackend::~EtcdStoreBackend() = default;

std::string EtcdStoreBackend::Seal(const std::string& key, const std::string& value) const {
  if (secret_.empty()) return value;
  return auth::Mac(secret_, {"tessera-etcd-v1", Full(key), value}) + value;
}

absl::StatusOr<std::string> EtcdStoreBackend::Unseal(const std::string& key,
                                                     const std::string& stored) const {
  if (secret_.empty()) return stored;
  const std::string value = stored.size() >= kMacBytes ? stored.substr(kMacBytes) : "";
  if (stored.size() < kMacBytes ||
      !auth::SameMac(stored.substr(0, kMacBytes),
                     auth::Mac(secret_, {"tessera-etcd-v1", Full(key), value}))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "etcd key '", Full(key),
        "' holds a value not written with this job's secret (another job using the same key "
        "prefix, or a forged write)"));
  }
  return value;
}

absl::Status EtcdStoreBackend::Set(const std::string& key, const std::string& value,
                                   absl::Duration timeout) {
  etcd::PutRequest request;
  request.set_key(Full(key));
  request.set_value(Seal(key, value));
  etcd::PutResponse response;
  return stub_->Call(&etcd::KV::Stub::Put, request, &response, absl::Now() + timeout);
}

absl::StatusOr<std::map<std::string, std::string>> EtcdStoreBackend::Await(
    const std::vector<std::string>& keys, absl::Duration wait, absl::Duration reply) {
  const absl::Time deadline = absl::Now() + wait;
  std::map<std::string, std::string> found;  // user key -> value
  std::set<std::string> missing;             // full keys
  for (const std::string& key : keys) missing.insert(Full(key));
  auto take = [&](const std::string& full_key, const std::string& stored) -> absl::Status {
    const std::string key = full_key.substr(key_prefix_.size());
    TESSERA_ASSIGN_OR_RETURN(auto value, Unseal(key, stored));
    found[key] = std::move(value);
    missing.erase(full_key);
    return absl::OkStatus();
  };
  while (true) {
    // Read what exists, in transactions of kKeysPerRead, and watch the rest
    // from just after the earliest read (see Note [The store on etcd]).
    int64_t revision = 0;
    const std::vector<std::string> unread(missing.begin(), missing.end());
    for (size_t first = 0; first < unread.size(); first += kKeysPerRead) {
      etcd::TxnRequest request;
      for (size_t i = first; i < std::min(unread.size(), first + kKeysPerRead); ++i) {
        *request.add_success() = RangeOp(unread[i]);
      }
      etcd::TxnResponse response;
      auto status = stub_->Call(&etcd::KV::Stub::Txn, request, &response,
                                std::max(deadline, absl::Now()) + reply);
      if (!status.ok()) return status;
      const int64_t read_at = response.header().revision();
      revision = revision == 0 ? read_at : std::min(revision, read_at);
      for (const etcd::ResponseOp& op : response.responses()) {
        for (const etcd::KeyValue& kv : op.response_range().kvs()) {
          if (auto taken = take(kv.key(), kv.value()); !taken.ok()) return taken;
        }
      }
    }
    if (missing.empty() || absl::Now() >= deadline) return found;
    for (const auto& [full_key, stored] : stub_->Watch(missing, revision + 1, deadline)) {
      if (auto taken = take(full_key, stored); !taken.ok()) return taken;
    }
    if (missing.empty() || absl::Now() + kRetryPause >= deadline) return found;
    absl::SleepFor(kRetryPause);  // the watch broke: read again
  }
}

absl::StatusOr<std::optional<std::string>> EtcdStoreBackend::Get(const std::string& key,
                                                                 absl::Duration wait,
                                                                 absl::Duration reply) {
  TESSERA_ASSIGN_OR_RETURN(auto found, Await({key}, wait, reply));
  auto it = found.find(key);
  if (it == found.end()) return std::nullopt;
  return std::move(it->second);
}

absl::StatusOr<std::vector<std::string>> EtcdStoreBackend::WaitForKeys(
    const std::vector<std::string>& keys, absl::Duration wait, absl::Duration reply) {
  TESSERA_ASSIGN_OR_RETURN(auto found, Await(keys, wait, reply));
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!found.count(key)) missing.push_back(key);
  }
  return missing;
}

absl::StatusOr<int64_t> EtcdStoreBackend::Add(const std::string& key, int64_t delta,
                                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    etcd::RangeRequest read;
    read.set_key(Full(key));
    etcd::RangeResponse current;
    auto status = stub_->Call(&etcd::KV::Stub::Range, read, &current, deadline);
    if (!status.ok()) return status;
    int64_t value = 0;
    etcd::TxnRequest request;
    etcd::Compare* unchanged = request.add_compare();
    unchanged->set_key(Full(key));
    if (current.kvs().empty()) {
      unchanged->set_target(etcd::Compare::VERSION);
      unchanged->set_version(0);
    } else {
      TESSERA_ASSIGN_OR_RETURN(auto stored, Unseal(key, current.kvs(0).value()));
      if (!absl::SimpleAtoi(stored, &value)) {
        return absl::FailedPreconditionError("key '" + key + "' is not an integer");
      }
      unchanged->set_target(etcd::Compare::MOD);
      unchanged->set_mod_revision(current.kvs(0).mod_revision());
    }
    if (delta == 0) return value;  // a read (Quorum polls a counter so): no write
    value += delta;
    *request.add_success() = PutOp(Full(key), Seal(key, std::to_string(value)));
    etcd::TxnResponse response;
    // Not repeated on Unavailable: the add may have been applied.
    status = stub_->Call(&etcd::KV::Stub::Txn, request, &response, deadline, /*retry=*/false);
    if (status.code() == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(
          absl::StrCat(status.message(), " (the add may or may not have been applied)"));
    }
    if (!status.ok()) return status;
    if (response.succeeded()) return value;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("other writers kept changing the key");
    }
  }
}

absl::StatusOr<std::string> EtcdStoreBackend::CompareSet(const std::string& key,
                                                         const std::string& expected,
                                                         const std::string& desired,
                                                         absl::Duration timeout) {
  etcd::TxnRequest request;
  etcd::Compare* holds = request.add_compare();
  holds->set_key(Full(key));
  if (expected.empty()) {
    holds->set_target(etcd::Compare::VERSION);
    holds->set_version(0);
  } else {
    holds->set_target(etcd::Compare::VALUE);
    holds->set_value(Seal(key, expected));
  }
  *request.add_success() = PutOp(Full(key), Seal(key, desired));
  *request.add_failure() = RangeOp(Full(key));
  etcd::TxnResponse response;
  // Safe to repeat: had a lost attempt applied, the next finds `desired`.
  auto status = stub_->Call(&etcd::KV::Stub::Txn, request, &response, absl::Now() + timeout);
  if (!status.ok()) return status;
  if (response.succeeded()) return desired;
  if (response.responses().empty() || response.responses(0).response_range().kvs().empty()) {
    return std::string();
  }
  return Unseal(key, response.responses(0).response_range().kvs(0).value());
}

absl::StatusOr<bool> EtcdStoreBackend::Delete(const std::string& key, absl::Duration timeout) {
  etcd::DeleteRangeRequest request;
  request.set_key(Full(key));
  etcd::DeleteRangeResponse response;
  auto status =
      stub_->Call(&etcd::KV::Stub::DeleteRange, request, &response, absl::Now() + timeout);
  if (!status.ok()) return status;
  return response.deleted() > 0;
}

absl::StatusOr<int64_t> EtcdStoreBackend::CountKeys(absl::Duration timeout) {
  etcd::RangeRequest request;
  request.set_key(key_prefix_);
  request.set_range_end(PrefixEnd(key_prefix_));
  request.set_count_only(true);
  etcd::RangeResponse response;
  auto status = stub_->Call(&etcd::KV::Stub::Range, request, &response, absl::Now() + timeout);
  if (!status.ok()) return status;
  return response.count();
}

absl::Status EtcdStoreBackend::Clear(const std::string& keep_prefix, absl::Duration timeout) {
  auto delete_range = [](const std::string& from, const std::string& to) {
    etcd::RequestOp op;
    op.mutable_request_delete_range()->set_key(from);
    op.mutable_request_delete_range()->set_range_end(to);
    return op;
  };
  etcd::TxnRequest request;
  if (keep_prefix.empty()) {
    *request.add_success() = delete_range(key_prefix_, PrefixEnd(key_prefix_));
  } else {
    *request.add_success() = delete_range(key_prefix_, Full(keep_prefix));
    *request.add_success() = delete_range(PrefixEnd(Full(keep_prefix)), PrefixEnd(key_prefix_));
  }
  etcd::TxnResponse response;
  return stub_->Call(&etcd::KV::Stub::Txn, request, &response, absl::Now() + timeout);
}

}  // namespace tessera::store
