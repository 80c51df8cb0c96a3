// StoreAuth: signs and checks the rendezvous store's calls with the job
// secret (auth/job_secret.h), so that only the job's own processes can
// read or change its rendezvous, and workers only believe the job's own store.
//
// Note [Store call authentication]
// The store is plain unary gRPC, so instead of a connection handshake every
// call carries its own proof, in gRPC metadata:
//   request:  nonce n = the client's session id (16 random bytes, fresh per
//             StoreClient) and a call counter (8 bytes, from 1),
//             HMAC(k, "tessera-store-v1", "request", method, n, request bytes)
//   response: HMAC(k, "tessera-store-v1", "response", method, n, response bytes)
//             (trailing metadata, computed once the response exists)
// The server serves a call only if its MAC checks out (else UNAUTHENTICATED
// naming the likely cause), and the client believes an answer only if the
// response MAC does: a store of another job, or a process posing as the
// store, cannot feed workers addresses — Gloo's connections, unlike RPC's,
// have no handshake of their own to catch a forged peer. Binding the
// response to n makes old answers useless to replay, and the server accepts
// each session's counter once (ReplayWindow), so a captured request cannot be
// resent either (a repeated add would count twice).
// Not covered: secrecy — keys and values travel in the clear, as
// TensorPipe's frames do. The threat is peers that can connect, not ones
// that can watch the wire (rpc/auth/handshake.h).
//
// Without a secret (an empty auth::JobSecret) nothing is signed or checked — the
// behaviour of stores before this existed, and of tests that set none.
//
// Thread-safety: thread-safe.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "auth/job_secret.h"
#include "common/mutex.h"
#include "store/replay_window.h"

namespace tessera::store {

class StoreAuth {
 public:
  explicit StoreAuth(auth::JobSecret secret);

  bool enabled() const { return !secret_.empty(); }

  // Client, before the call: adds the nonce and request MAC to `context`;
  // returns the nonce, for CheckResponse.
  std::string SignRequest(grpc::ClientContext* context, std::string_view method,
                          const google::protobuf::Message& request) const;
  // The same in two steps: the next call's signature (empty when disabled),
  // and putting one on a call (tests attach one twice, as a replay would).
  struct Signature {
    std::string nonce;
    std::string mac;
  };
  Signature Sign(std::string_view method, const google::protobuf::Message& request) const;
  static void Attach(const Signature& signature, grpc::ClientContext* context);
  // Client, after a call that succeeded: is `response` from the job's store?
  absl::Status CheckResponse(const grpc::ClientContext& context, std::string_view method,
                             const std::string& nonce,
                             const google::protobuf::Message& response) const;

  // Server, before serving: OK, or UNAUTHENTICATED to return to the caller.
  grpc::Status CheckRequest(const grpc::ServerContext& context, std::string_view method,
                            const google::protobuf::Message& request) const;
  // The same, given the nonce and MAC the caller sent (its metadata).
  grpc::Status CheckRequest(std::string_view nonce, std::string_view mac, std::string_view method,
                            const google::protobuf::Message& request) const;
  // Server, after serving a checked request: signs `response`.
  void SignResponse(grpc::ServerContext* context, std::string_view method,
                    const google::protobuf::Message& response) const;

 private:
  std::string RequestMac(std::string_view method, std::string_view nonce,
                         const google::protobuf::Message& request) const;
  std::string ResponseMac(std::string_view method, std::string_view nonce,
                          const google::protobuf::Message& response) const;

  const auth::JobSecret secret_;
  // Client side: this client's session and its last call's number.
  const std::string session_;
  mutable std::atomic<uint64_t> calls_{0};
  // Server side: per session, the call numbers already served.
  mutable Mutex mu_;
  mutable std::map<std::string, ReplayWindow> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::store
