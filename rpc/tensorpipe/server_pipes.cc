// The server side of the TensorPipe agent: pipes peers opened to this
// worker, their handshake, and the requests it serves on them
// (tensorpipe_agent_impl.h).
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/tensorpipe_agent_impl.h"

namespace tessera::rpc {

void TensorPipeAgent::ReadRequest(std::shared_ptr<ServerPipe> server) {
  // Tensors in shared memory only from a peer that proved the job secret.
  FdInbox* inbox = server->peer.has_value() ? inbox_.get() : nullptr;
  ReadFrame(
      server->pipe, limits_, buffers_.get(), inbox,
      [this, server](absl::StatusOr<Message> message) {
        if (!message.ok()) {
          if (message.status().code() == absl::StatusCode::kUnavailable) {
            TESSERA_LOG(DEBUG) << self_.name << ": incoming connection ended: " << message.status();
            if (server->peer.has_value()) peer_failures_.Notify(server->member_rank.load());
          } else {
            TESSERA_LOG(WARNING) << self_.name << ": closing incoming connection: bad frame: "
                                 << message.status().message();
          }
          DropServerPipe(server);
          return;
        }
        if (!server->peer.has_value()) {
          auto status = HandleServerHandshake(server, *message);
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
          TESSERA_LOG(DEBUG) << self_.name << ": rank " << server->member_rank.load()
                             << " closed an idle connection";
          DropServerPipe(server);
          return;
        }
        if (kind != proto::CALL && kind != proto::INTERNAL_CALL) {
          TESSERA_LOG(WARNING) << self_.name
                               << ": closing incoming connection: expected a request, "
                               << "got message kind " << kind;
          DropServerPipe(server);
          return;
        }
        served_.RequestReceived();
        // The identity the peer proved, not what the envelope claims.
        const int from = server->member_rank.load();
        if (from == kStaleIncarnation) {
          // Answered, not served: the stale process learns why.
          const PeerIdentity& peer = *server->peer;
          Respond(
              server->pipe, from,
              ResponseTo(message->envelope.request_id(),
                         StaleIncarnationError(peer.name, peer.rank, peer.incarnation, self_.name),
                         self_.name, self_.rank));
          ReadRequest(server);
          return;
        }
        message->envelope.set_origin_rank(from);
        requests_.Serve(from, *std::move(message),
                        [this, from, pipe = server->pipe](Message response) {
                          Respond(pipe, from, std::move(response));
                        });
        ReadRequest(server);
      });
}

absl::Status TensorPipeAgent::HandleServerHandshake(const std::shared_ptr<ServerPipe>& server,
                                                    const Message& message) {
  auto reply = std::make_shared<Message>();
  if (!server->challenged) {
    TESSERA_ASSIGN_OR_RETURN(auto challenge, server->handshake.OnHello(message.envelope));
    reply->envelope = std::move(challenge);
    server->challenged = true;
  } else {
    auto peer = server->handshake.OnProof(message.envelope);
    if (!peer.ok()) return peer.status();
    timer_->Cancel(server->handshake_timer);
    {
      MutexLock lock(&mu_);
      const int member_rank = MemberRank(peer->name, peer->rank, peer->incarnation, workers_);
      if (member_rank == kStaleIncarnation) {
        return StaleIncarnationError(peer->name, peer->rank, peer->incarnation, self_.name);
      }
      server->member_rank = member_rank;
      server->peer = *std::move(peer);
    }
    reply->envelope = ServerHandshake::Accepted();
  }
  WriteMessage(server->pipe, std::move(reply), [](const tp::Error&) {});
  return absl::OkStatus();
}

void TensorPipeAgent::RejectPeer(const std::shared_ptr<ServerPipe>& server,
                                 const absl::Status& why) {
  TESSERA_LOG(WARNING) << self_.name << ": refused a connection: " << why.message();
  auto rejection = std::make_shared<Message>();
  rejection->envelope = ServerHandshake::Rejected(why, self_.name);
  // Closed once the peer has the reason (or the write failed).
  WriteMessage(server->pipe, std::move(rejection),
               [this, server](const tp::Error&) { DropServerPipe(server); });
}

void TensorPipeAgent::DropServerPipe(const std::shared_ptr<ServerPipe>& server) {
  timer_->Cancel(server->handshake_timer);
  server->pipe->close();
  MutexLock lock(&mu_);
  server_pipes_.erase(server);
}

void TensorPipeAgent::Respond(const std::shared_ptr<tp::Pipe>& pipe, int to_rank,
                              Message response) {
  auto message = std::make_shared<Message>(std::move(response));
  SharedMemoryRoute route = RouteFor(to_rank, *message);
  WriteMessage(
      pipe, std::move(message),
      [this](const tp::Error& error) {
        if (error) {
          TESSERA_LOG(DEBUG) << self_.name << ": response not delivered: " << error.what();
        }
        served_.ResponseSent();
      },
      route);
}

}  // namespace tessera::rpc
