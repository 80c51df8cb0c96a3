// A worker's inbox for file descriptors from workers on the same host: how
// a tensor in shared memory reaches a peer without its bytes (see Note [Tensors
// in shared memory], rpc/shared_tensors.h).
//
// Note [Descriptor inbox]: an abstract Unix datagram socket with a random
// name, published in the worker's locality. A sender posts a segment's
// descriptor under a ticket (SCM_RIGHTS; the kernel holds a reference from
// then on, so the sender may drop its tensor at once), then writes the frame
// that names the ticket. A Unix socket queues a datagram before sendmsg
// returns, so the receiver, reading that frame, finds the descriptor already
// there: nothing ever waits for one. A thread sleeps in poll() and moves what
// arrives into a table, so the socket's short queue (net.unix.max_dgram_qlen,
// 10 datagrams by default) empties as fast as that thread runs. A burst of
// posts can still fill it (40 calls sent in a loop did, on two cores): a post
// then waits for room, up to kPostWait, before its bytes travel instead. Only datagrams from this
// user are taken (SCM_CREDENTIALS); anything malformed is closed and dropped. Descriptors nobody
// takes (their frame was lost with its sender) are closed after kUnclaimedLifetime, and the table
// is bounded.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tessera::rpc {

class FdInbox {
 public:
  // Most descriptors one post carries (and so one message's tensors that
  // travel as handles; the rest travel as bytes).
  static constexpr size_t kMaxFdsPerPost = 64;
  static constexpr size_t kMaxUnclaimed = 4096;
  static constexpr absl::Duration kUnclaimedLifetime = absl::Seconds(60);
  static constexpr absl::Duration kPostWait = absl::Milliseconds(100);

  // Binds a fresh inbox and starts its thread.
  static absl::StatusOr<std::unique_ptr<FdInbox>> Open();
  ~FdInbox();
  FdInbox(const FdInbox&) = delete;
  FdInbox& operator=(const FdInbox&) = delete;

  // The abstract socket name (without its leading NUL), for peers.
  const std::string& name() const { return name_; }

  // A ticket no other post from this process uses.
  uint64_t NewTicket();

  // Posts `fds` (each stays open here; the peer gets its own) under
  // `tickets` to the inbox named `peer`, waiting at most kPostWait for room
  // in a full one. Unavailable when that inbox is gone or stays full: then
  // the caller sends the bytes instead.
  absl::Status Post(const std::string& peer, const std::vector<uint64_t>& tickets,
                    const std::vector<int>& fds);

  // The descriptor posted here under `ticket`, now the caller's to close;
  // NotFound if none came (see the Note: a missing one will not come).
  absl::StatusOr<int> Take(uint64_t ticket);

  // Descriptors waiting to be taken (for tests).
  size_t unclaimed() const;

 private:
  struct Unclaimed {
    int fd;
    absl::Time arrived;
  };

  FdInbox(int socket, int post_socket, int wake, std::string name, uint64_t first_ticket);
  void Run();
  // Receives every queued datagram without blocking; closes expired and
  // excess descriptors.
  void DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One datagram: false when the queue is empty.
  bool ReceiveOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int socket_;       // bound, non-blocking: receives
  const int post_socket_;  // unbound, blocking up to kPostWait: sends
  const int wake_;         // eventfd: stops the thread
  const std::string name_;
  std::atomic<uint64_t> next_ticket_;
  mutable Mutex mu_;
  std::map<uint64_t, Unclaimed> unclaimed_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tessera::rpc
