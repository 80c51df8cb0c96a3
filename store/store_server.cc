#include "store/store_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/grpc_logging.h"
#include "common/host_address.h"
#include "common/mutex.h"
#include "common/status.h"
#include "proto/store.grpc.pb.h"
#include "store/applied_writes.h"
#include "store/store_auth.h"

namespace tessera::store {

class StoreServiceImpl final : public proto::Store::Service {
 public:
  explicit StoreServiceImpl(auth::JobSecret secret) : auth_(std::move(secret)) {}

  grpc::Status Set(grpc::ServerContext* context, const proto::SetRequest* request,
                   proto::SetResponse* response) override {
    return Serve(context, "Set", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      data_[request->key()] = request->value();
      cv_.SignalAll();
      return grpc::Status::OK;
    });
  }

  grpc::Status Get(grpc::ServerContext* context, const proto::GetRequest* request,
                   proto::GetResponse* response) override {
    return Serve(context, "Get", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      auto present = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return shutting_down_ || data_.count(request->key()) > 0;
      };
      cv_.WaitUntil(&mu_, present, absl::Now() + Timeout(request->timeout_ms()));
      auto it = data_.find(request->key());
      response->set_found(it != data_.end());
      if (it != data_.end()) response->set_value(it->second);
      return grpc::Status::OK;
    });
  }

  grpc::Status Wait(grpc::ServerContext* context, const proto::WaitRequest* request,
                    proto::WaitResponse* response) override {
    return Serve(context, "Wait", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      auto all_present = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (shutting_down_) return true;
        for (const std::string& key : request->keys()) {
          if (data_.count(key) == 0) return false;
        }
        return true;
      };
      cv_.WaitUntil(&mu_, all_present, absl::Now() + Timeout(request->timeout_ms()));
      for (const auto& key : request->keys()) {
        auto it = data_.find(key);
        if (it == data_.end()) {
          response->add_missing(key);
        } else if (request->with_values()) {
          proto::KeyValue* entry = response->add_present();
          entry->set_key(key);
          entry->set_value(it->second);
        }
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status Add(grpc::ServerContext* context, const proto::AddRequest* request,
                   proto::AddResponse* response) override {
    return Serve(context, "Add", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      if (applied_.Replay(request->request_id(), response)) return grpc::Status::OK;
      int64_t current = 0;
      auto it = data_.find(request->key());
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "store key '" + request->key() + "' is not an integer");
      }
      current += request->delta();
      data_[request->key()] = std::to_string(current);
      cv_.SignalAll();
      response->set_value(current);
      applied_.Record(request->request_id(), *response);
      return grpc::Status::OK;
    });
  }

  grpc::Status CompareSet(grpc::ServerContext* context, const proto::CompareSetRequest* request,
                          proto::CompareSetResponse* response) override {
    return Serve(context, "CompareSet", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      if (applied_.Replay(request->request_id(), response)) return grpc::Status::OK;
      CompareSetLocked(*request, response);
      applied_.Record(request->request_id(), *response);
      return grpc::Status::OK;
    });
  }

  grpc::Status Delete(grpc::ServerContext* context, const proto::DeleteRequest* request,
                      proto::DeleteResponse* response) override {
    return Serve(context, "Delete", *request, response, [&]() -> grpc::Status {
      MutexLock lock(&mu_);
      if (applied_.Replay(request->request_id(), response)) return grpc::Status::OK;
      response->set_deleted(data_.erase(request->key()) > 0);
      applied_.Record(request->request_id(), *response);
      return grpc::Status::OK;
    });
  }

  void Clear(const std::string& keep_prefix) {
    MutexLock lock(&mu_);
    for (auto it = data_.begin(); it != data_.end();) {
      const bool keep = !keep_prefix.empty() && it->first.rfind(keep_prefix, 0) == 0;
      it = keep ? std::next(it) : data_.erase(it);
    }
  }

  // Releases every waiting handler so the gRPC server can stop promptly.
  void BeginShutdown() {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    cv_.SignalAll();
  }

 private:
  // Runs `body` for a request that proves it comes from the job, then signs
  // the response (see Note [Store call authentication]).
  template <typename Request, typename Response, typename Body>
  grpc::Status Serve(grpc::ServerContext* context, const char* method, const Request& request,
                     const Response* response, Body body) {
    grpc::Status status = auth_.CheckRequest(*context, method, request);
    if (!status.ok()) return status;
    status = body();
    if (status.ok()) auth_.SignResponse(context, method, *response);
    return status;
  }

  // Sets the key to `desired` if it holds `expected` (an absent key holds
  // ""); answers with what it holds after.
  void CompareSetLocked(const proto::CompareSetRequest& request,
                        proto::CompareSetResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = data_.find(request.key());
    if (it == data_.end()) {
      if (request.expected().empty()) {
        data_[request.key()] = request.desired();
        cv_.SignalAll();
        response->set_value(request.desired());
      }
      return;
    }
    if (it->second == request.expected()) {
      it->second = request.desired();
      cv_.SignalAll();
    }
    response->set_value(it->second);
  }

  // Server-side waits are capped so a client that asked for "forever" cannot
  // pin a thread; the client retries if it really wants to wait longer.
  static absl::Duration Timeout(int64_t timeout_ms) {
    constexpr int64_t kMaxWaitMs = 10 * 60 * 1000;
    if (timeout_ms <= 0) return absl::ZeroDuration();
    return absl::Milliseconds(std::min(timeout_ms, kMaxWaitMs));
  }

  const StoreAuth auth_;
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  AppliedWrites applied_ ABSL_GUARDED_BY(mu_);  // Add, CompareSet, Delete: sent again safely
};

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                                auth::JobSecret secret) {
  std::unique_ptr<StoreServer> server(new StoreServer());
  RouteGrpcLogging();
  server->service_ = std::make_unique<StoreServiceImpl>(std::move(secret));
  grpc::ServerBuilder builder;
  // A connection that has not sent HTTP/2's preface and settings by then is
  // closed (gRPC's default is 120 s): silent strangers do not pile up.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10'000);
  // Clients ping every few seconds, with or without calls in flight (see Note
  // [Store connections across a cut link], store_channel.cc): allowed, not
  // punished with GOAWAY as gRPC's defaults would.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  int bound_port = 0;
  builder.AddListeningPort(JoinHostPort(host, port), grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError("store: cannot listen on " + JoinHostPort(host, port));
  }
  server->port_ = bound_port;
  return server;
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::StartForMaster(
    const std::string& master_addr, int port, auth::JobSecret secret) {
  TESSERA_ASSIGN_OR_RETURN(auto host, StoreListenHost(master_addr));
  return Start(host, port, std::move(secret));
}

void StoreServer::Clear(const std::string& keep_prefix) { service_->Clear(keep_prefix); }

void StoreServer::Shutdown() {
  if (server_ == nullptr) return;
  service_->BeginShutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

StoreServer::~StoreServer() { Shutdown(); }

}  // namespace tessera::store
