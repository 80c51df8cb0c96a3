#include "rpc/tensorpipe/server_pipes.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::rpc {

namespace tp = tensorpipe;

void ServerPipes::Accept(std::shared_ptr<tp::Pipe> pipe) {
  auto server = std::make_shared<ServerPipe>(setup_.secret);
  server->pipe = std::move(pipe);
  // A peer that connects and never proves itself is cut off.
  std::weak_ptr<ServerPipe> weak = server;
  server->handshake_timer =
      setup_.timer->Schedule(absl::Now() + setup_.handshake_timeout, [this, weak] {
        auto expired = weak.lock();
        if (expired == nullptr || expired->peer.has_value()) return;
        RejectPeer(expired, absl::UnauthenticatedError(
                                absl::StrCat("no connection handshake within ",
                                             absl::FormatDuration(setup_.handshake_timeout))));
      });
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    pipes_.insert(server);
  }
  ReadRequest(server);
}

void ServerPipes::SetWorkers(const std::vector<WorkerInfo>& workers) {
  MutexLock lock(&mu_);
  workers_ = workers;
  for (const auto& server : pipes_) {
    if (server->peer.has_value()) {
      server->member_rank =
          MemberRank(server->peer->name, server->peer->rank, server->peer->incarnation, workers_);
    }
  }
}

void ServerPipes::Close() {
  std::set<std::shared_ptr<ServerPipe>> pipes;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    pipes = pipes_;
  }
  // Cancel() waits for a callback under way, so none touches `this` later.
  for (const auto& server : pipes) setup_.timer->Cancel(server->handshake_timer);
}

void ServerPipes::Clear() {
  MutexLock lock(&mu_);
  pipes_.clear();
}

void ServerPipes::ReadRequest(std::shared_ptr<ServerPipe> server) {
  // Tensors in shared memory only from a peer that proved the job secret.
  FdInbox* inbox = server->peer.has_value() ? inbox_ : nullptr;
  ReadFrame(server->pipe, setup_.limits, setup_.buffers, inbox,
            [this, server](absl::StatusOr<Message> message) {
              if (!message.ok()) {
                if (message.status().code() == absl::StatusCode::kUnavailable) {
                  TESSERA_LOG(DEBUG)
                      << setup_.self_name << ": incoming connection ended: " << message.status();
                  if (server->peer.has_value())
                    setup_.peer_failures->Notify(server->member_rank.load());
                } else {
                  TESSERA_LOG(WARNING)
                      << setup_.self_name
                      << ": closing incoming connection: bad frame: " << message.status().message();
                }
                Drop(server);
                return;
              }
              if (!server->peer.has_value()) {
                auto status = HandleHandshake(server, *message);
                if (!status.ok()) {
                  RejectPeer(server, status);
                  return;
                }
                ReadRequest(server);
                return;
              }
              const auto kind = message->envelope.kind();
              if (kind == proto::GOODBYE) {
                // The caller closes an idle pipe: not a failure (see Note [Idle
                // connections], rpc/idle_connections.h).
                TESSERA_LOG(DEBUG) << setup_.self_name << ": rank " << server->member_rank.load()
                                   << " closed an idle connection";
                Drop(server);
                return;
              }
              if (kind != proto::CALL && kind != proto::INTERNAL_CALL) {
                TESSERA_LOG(WARNING)
                    << setup_.self_name << ": closing incoming connection: expected a request, "
                    << "got message kind " << kind;
                Drop(server);
                return;
              }
              setup_.served->RequestReceived();
              // The identity the peer proved, not what the envelope claims.
              const int from = server->member_rank.load();
              if (from == kStaleIncarnation) {
                // Answered, not served: the stale process learns why.
                const PeerIdentity& peer = *server->peer;
                Respond(server->pipe, from,
                        ResponseTo(message->envelope.request_id(),
                                   StaleIncarnationError(peer.name, peer.rank, peer.incarnation,
                                                         setup_.self_name),
                                   setup_.self_name, setup_.self_rank));
                ReadRequest(server);
                return;
              }
              message->envelope.set_origin_rank(from);
              setup_.requests->Serve(from, *std::move(message),
                                     [this, from, pipe = server->pipe](Message response) {
                                       Respond(pipe, from, std::move(response));
                                     });
              ReadRequest(server);
            });
}

absl::Status ServerPipes::HandleHandshake(const std::shared_ptr<ServerPipe>& server,
                                          const Message& message) {
  auto reply = std::make_shared<Message>();
  if (!server->challenged) {
    TESSERA_ASSIGN_OR_RETURN(auto challenge, server->handshake.OnHello(message.envelope));
    reply->envelope = std::move(challenge);
    server->challenged = true;
  } else {
    auto peer = server->handshake.OnProof(message.envelope);
    if (!peer.ok()) return peer.status();
    setup_.timer->Cancel(server->handshake_timer);
    {
      MutexLock lock(&mu_);
      const int member_rank = MemberRank(peer->name, peer->rank, peer->incarnation, workers_);
      if (member_rank == kStaleIncarnation) {
        return StaleIncarnationError(peer->name, peer->rank, peer->incarnation, setup_.self_name);
      }
      server->member_rank = member_rank;
      server->peer = *std::move(peer);
    }
    reply->envelope = ServerHandshake::Accepted();
  }
  WriteMessage(server->pipe, std::move(reply), [](const tp::Error&) {});
  return absl::OkStatus();
}

void ServerPipes::RejectPeer(const std::shared_ptr<ServerPipe>& server, const absl::Status& why) {
  TESSERA_LOG(WARNING) << setup_.self_name << ": refused a connection: " << why.message();
  auto rejection = std::make_shared<Message>();
  rejection->envelope = ServerHandshake::Rejected(why, setup_.self_name);
  // Closed once the peer has the reason (or the write failed).
  WriteMessage(server->pipe, std::move(rejection),
               [this, server](const tp::Error&) { Drop(server); });
}

void ServerPipes::Drop(const std::shared_ptr<ServerPipe>& server) {
  setup_.timer->Cancel(server->handshake_timer);
  server->pipe->close();
  MutexLock lock(&mu_);
  pipes_.erase(server);
}

void ServerPipes::Respond(const std::shared_ptr<tp::Pipe>& pipe, int to_rank, Message response) {
  auto message = std::make_shared<Message>(std::move(response));
  SharedMemoryRoute route = setup_.route_for(to_rank, *message);
  WriteMessage(
      pipe, std::move(message),
      [this](const tp::Error& error) {
        if (error) {
          TESSERA_LOG(DEBUG) << setup_.self_name << ": response not delivered: " << error.what();
        }
        setup_.served->ResponseSent();
      },
      route);
}

}  // namespace tessera::rpc
