#include "examples/send_recv_collectives/collectives.h"

#include <ATen/ops/empty_like.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::examples {
namespace {

// Tags keep the messages of one collective's rounds apart.
constexpr uint64_t kBroadcastTag = 1000, kRingTag = 2000;

absl::Status Await(collectives::Work work, absl::Duration timeout, const std::string& what) {
  auto done = work.Wait(timeout);
  return done.ok() ? absl::OkStatus()
                   : absl::Status(done.status().code(),
                                  what + ": " + std::string(done.status().message()));
}

}  // namespace

absl::Status TreeBroadcast(collectives::ProcessGroup& group, at::Tensor& tensor, int root,
                           absl::Duration timeout) {
  const int n = group.size();
  const int me = (group.rank() - root + n) % n;  // position relative to the root
  for (int span = 1, round = 0; span < n; span <<= 1, ++round) {
    if (me < span && me + span < n) {  // has it: passes it on
      const int to = (me + span + root) % n;
      absl::Status sent = Await(group.Send(tensor, to, kBroadcastTag + round), timeout,
                                absl::StrCat("broadcast round ", round, ": send to rank ", to));
      if (!sent.ok()) return sent;
    } else if (me >= span && me < 2 * span) {  // gets it this round
      const int from = (me - span + root) % n;
      absl::Status got = Await(group.Recv(tensor, from, kBroadcastTag + round), timeout,
                               absl::StrCat("broadcast round ", round, ": recv from rank ", from));
      if (!got.ok()) return got;
    }
  }
  return absl::OkStatus();
}

absl::Status RingAllreduce(collectives::ProcessGroup& group, at::Tensor& tensor,
                           absl::Duration timeout) {
  const int n = group.size(), rank = group.rank();
  if (n == 1) return absl::OkStatus();
  const int next = (rank + 1) % n, previous = (rank - 1 + n) % n;
  // n chunks of nearly equal size (the last ones may be one element shorter).
  std::vector<at::Tensor> chunks = tensor.tensor_split(n);
  auto exchange = [&](int step, int send_chunk, int recv_chunk, bool add) -> absl::Status {
    at::Tensor incoming = at::empty_like(chunks[recv_chunk]);
    // Send and receive at once: every rank sends first would deadlock
    // without buffering.
    collectives::Work sent = group.Send(chunks[send_chunk], next, kRingTag + step);
    collectives::Work got = group.Recv(incoming, previous, kRingTag + step);
    absl::Status status =
        Await(got, timeout, absl::StrCat("ring step ", step, ": recv from rank ", previous));
    if (!status.ok()) return status;
    status = Await(sent, timeout, absl::StrCat("ring step ", step, ": send to rank ", next));
    if (!status.ok()) return status;
    if (add) {
      chunks[recv_chunk].add_(incoming);
    } else {
      chunks[recv_chunk].copy_(incoming);
    }
    return absl::OkStatus();
  };
  // Reduce-scatter: after step s, chunk (rank - s - 1) holds s + 2 ranks' sum;
  // at the end this rank holds the full sum of chunk (rank + 1) mod n.
  for (int step = 0; step < n - 1; ++step) {
    absl::Status status = exchange(step, (rank - step + n) % n, (rank - step - 1 + n) % n, true);
    if (!status.ok()) return status;
  }
  // All-gather: pass the finished chunks around the ring.
  for (int step = 0; step < n - 1; ++step) {
    absl::Status status =
        exchange(n - 1 + step, (rank + 1 - step + n) % n, (rank - step + n) % n, false);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace tessera::examples
