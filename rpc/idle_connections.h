// Note [Idle connections]
// A worker keeps one outgoing connection per peer it calls (a TensorPipe
// pipe, a gRPC stream and its channel). In a job of hundreds of workers an
// all-to-all would leave each holding hundreds of them — descriptors on
// both sides, and for TensorPipe a connection per channel as well — long
// after the calls ended. So a worker keeps at most
// RpcOptions::max_idle_connections connections with no call in flight; when
// an answer leaves more idle than that, the least recently used are closed
// and the next call to such a peer connects again.
//
// Closing is said, not done: the caller sends GOODBYE on the connection
// (no call of its is in flight there, and none can claim the connection
// any more) and the callee, reading it, closes its end; the caller's read
// then ends, quietly. Without the GOODBYE the callee would take the closed
// connection for the caller's death (an incoming connection ending is how a
// worker learns that a peer failed). The cost: a callee whose only
// connection from a caller was closed hears of that caller's death at its
// next call to it, not at once — which is why the default bound is above
// what jobs of ordinary size reach.
//
// Thread-safety: thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tessera::rpc {

// One outgoing connection's calls in flight; keeps the agent's count of
// idle connections (`idle_count`, which must outlive it).
class ConnectionUse {
 public:
  explicit ConnectionUse(std::atomic<int>* idle_count) : idle_count_(idle_count) {}

  // A call starts on the connection: false if it is closing (take another).
  bool Claim();
  // A call's answer came: true if that left the connection idle.
  bool Release();
  // The connection ended (broke, or closed): it is idle no more.
  void Ended();
  // Marks the connection closing if it is still idle: true then, and no
  // call claims it any more.
  bool CloseIfIdle();
  // Whether CloseIfIdle closed it: its end is expected, not a failure.
  bool closing() const;
  // Since when it has been idle; InfiniteFuture while in use or ended.
  absl::Time idle_since() const;

 private:
  std::atomic<int>* const idle_count_;
  mutable Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool idle_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time idle_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

// Takes the least recently used idle connections beyond `bound` out of
// `connections` (by peer rank; each Connection has a ConnectionUse `use`),
// marked closing: the caller says GOODBYE on each. Call under the lock
// that guards `connections`.
template <typename Connection>
std::vector<std::shared_ptr<Connection>> TakeIdleBeyond(
    std::map<int, std::shared_ptr<Connection>>& connections, int bound) {
  std::vector<std::pair<absl::Time, int>> idle;  // since, rank
  for (const auto& [rank, connection] : connections) {
    const absl::Time since = connection->use.idle_since();
    if (since != absl::InfiniteFuture()) idle.emplace_back(since, rank);
  }
  const int excess = static_cast<int>(idle.size()) - bound;
  std::vector<std::shared_ptr<Connection>> taken;
  if (excess <= 0) return taken;
  std::partial_sort(idle.begin(), idle.begin() + excess, idle.end());
  for (int i = 0; i < excess; ++i) {
    auto it = connections.find(idle[i].second);
    if (!it->second->use.CloseIfIdle()) continue;  // a call claimed it meanwhile
    taken.push_back(std::move(it->second));
    connections.erase(it);
  }
  return taken;
}

}  // namespace tessera::rpc
