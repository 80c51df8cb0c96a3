// Quorum: the replicas of a fault-tolerant DDP job agree, at every step,
// on who takes part — through the rendezvous store, with a deadline.
//
// Note [Quorum per step] (torchft's idea, over Tessera's store): steps are
// taken in rounds r = 0, 1, ... Each replica that wants to take part in a
// round says so: it writes its arrival key (its id and how many steps it
// has committed); one that was not in the previous round's quorum (new,
// restarted, or late) also takes a newcomer slot, so that the others learn
// its id. The round's quorum is closed by the first replica whose wait ends
// — when every member of the previous quorum has arrived, or at the
// deadline (a member that died never does) — with a compare-and-set of the
// round's quorum key: whatever the others saw, all of them read the one
// value that won, so all agree. A replica that arrives after the close
// takes part from a later round: not the next one but one further on
// after every miss (1, 2, 4 ... up to kMaxLookahead rounds), waiting for
// the rounds between to close. A round closes as soon as its known
// members are in, so a newcomer whose way in (some ten store calls) takes
// longer than the others' step, as on a loaded machine, and went for the
// next round after each miss, missed it at the same point every time, for
// the rest of the job. On the steady path a round costs each
// member four store round trips (arrive, one read that waits for the
// others, the newcomer count, the close), all of them off the step's
// critical path: FaultTolerantDdp joins while forward and backward run.
// After the round's collective, a member whose part succeeded claims the
// step (below): one compare-and-set, the step's only synchronous store call.
//
// Note [No split brain]: rounds are totally ordered, but that alone does
// not keep two groups of replicas from committing in rounds of their own
// — a replica cut off from the others (or restarted without its state)
// that closed rounds alone trained a second model, and every launcher
// exited 0. Three rules keep one model:
//  - Steps are claimed. Step s is committed by at most one round in the
//    whole job: a member whose part of round r succeeded sets
//    <prefix>/step/<s> to r by compare-and-set, and commits only if that
//    key holds its own round. There is no vote, so members of one round
//    may decide differently — and that is safe: every member whose
//    collective completed holds the same averaged gradient (an allreduce
//    completes on a member only once every member's contribution is in),
//    so all that commit step s apply the same update to the same state; a
//    member whose collective failed commits nothing, is behind at its next
//    round, and recovers from one that committed. A quorum that is not on
//    the latest state finds its step claimed, commits nothing, and waits
//    in its next rounds for the replicas of the round that holds the state
//    (the claim names it), which it recovers from. By induction every
//    replica with k committed steps holds the same parameters as every
//    other one with k.
//  - A round with fewer than min_replicas members (by default a majority
//    of the replicas the job started with: two majorities always share a
//    replica) commits nothing: its members try the next round, waiting for
//    more replicas, up to rejoin_timeout.
//  - The store unreachable (a cut link) is waited out, up to
//    rejoin_timeout: Join retries, and a claim that cannot be made or read
//    counts as not committed — safe, since the claims decide: if the
//    others did commit, this replica is behind and recovers at its next
//    round.
//
// Each round leaves keys in the store (arrival keys, newcomer slots: ~1 per
// member); the member of rank 0 deletes those of rounds no one reads any
// more, every kCleanupEvery rounds, on a thread of its own so that the step
// does not wait for it. The small quorum keys stay: a replica entering late
// must see those rounds as closed.
//
// Thread-safety: one thread at a time per replica uses its Quorum (Join may
// run on another thread than Commit, one after the other).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/timeouts.h"
#include "store/store_client.h"

namespace tessera::ddp {

struct QuorumOptions {
  // Keys under this prefix of the store.
  std::string prefix = "tessera/ft";
  // How long a round waits for the members of the previous quorum (and the
  // first round for `initial_replicas`) before closing without them.
  // Zero: 5 s (round_timeout()).
  absl::Duration timeout = absl::ZeroDuration();
  // Replicas expected in the first round.
  int initial_replicas = 1;
  // A round with fewer members commits nothing (see Note [No split brain]);
  // 0: a majority of initial_replicas.
  int min_replicas = 0;
  // How long a replica keeps trying to take part in a round that can
  // commit — the store unreachable, rounds below min_replicas, its steps
  // refused because another quorum holds the latest state — before Join
  // (DeadlineExceeded) or Commit (FailedPrecondition) gives up.
  absl::Duration rejoin_timeout = absl::Minutes(5);

  // `timeout`, or its default.
  absl::Duration round_timeout() const { return OrDefault(timeout, absl::Seconds(5)); }
  // min_replicas, or the majority it stands for.
  int RequiredReplicas() const;
};

struct QuorumMember {
  std::string id;
  int64_t step = 0;  // steps it has committed
};

struct QuorumRound {
  int64_t round = 0;
  std::vector<QuorumMember> members;  // by id; index = rank in the round's group
  int rank = -1;                      // this replica's index in `members`
  // Whether the members differ from the previous round's (the process group
  // must be formed again).
  bool changed = true;
  int64_t max_step() const;
};

class Quorum {
 public:
  Quorum(store::StoreClient* store, std::string replica_id, QuorumOptions options);
  ~Quorum();
  Quorum(const Quorum&) = delete;
  Quorum& operator=(const Quorum&) = delete;

  // Takes part in the next round this replica can enter, with `step`
  // committed steps: waits for the round's quorum, skipping rounds closed
  // without it or too small to commit (bounded by rejoin_timeout).
  absl::StatusOr<QuorumRound> Join(int64_t step);
  // Whether this replica commits `round`'s step: true only if its part
  // succeeded (`ok`: its collective completed) and its round holds the
  // claim on the step (see Note [No split brain]). A claim it cannot make or
  // read is false.
  absl::StatusOr<bool> Commit(const QuorumRound& round, bool ok);

 private:
  std::string Key(int64_t round, const std::string& what) const;
  std::string ArrivalKey(int64_t round, const std::string& id) const;
  // One attempt at round next_round_ (and on): the round, or nullopt when
  // it closed without this replica or with too few (`why` says which).
  absl::StatusOr<std::optional<QuorumRound>> EnterRound(int64_t step, std::string* why);
  // After `round` found its step claimed by round `winner`: waits for the
  // winner's members from now on; FailedPrecondition once that has lasted
  // rejoin_timeout.
  absl::Status FellBehind(const QuorumRound& round, int64_t winner);
  absl::StatusOr<std::vector<QuorumMember>> Closed(int64_t round, absl::Duration wait) const;
  // Waits (up to the timeout) for round `r`'s expected replicas to arrive;
  // returns those that did.
  absl::StatusOr<std::vector<QuorumMember>> AwaitArrivals(int64_t r) const;
  using Arrivals = std::map<std::string, int64_t>;  // id -> committed steps
  // Reads into `arrived` the arrival keys of round `r` of those `ids` not in
  // it yet, waiting up to `wait` for all of them.
  absl::Status ReadArrivals(int64_t r, const std::vector<std::string>& ids, absl::Duration wait,
                            Arrivals* arrived) const;
  // Reads into `arrived` the newcomer slots of round `r` not read yet.
  absl::Status ReadNewcomers(int64_t r, std::vector<bool>* slots_read, Arrivals* arrived) const;
  // The last round closed, as its first member noted it (-1: none yet).
  absl::StatusOr<int64_t> LastClosed() const;
  // Round `r` closed without this replica, or before it arrived: the next
  // round it tries is lookahead_ on from r or the last round closed,
  // whichever is later, and lookahead_ doubles (see Note [Quorum per step]).
  void Missed(int64_t r);
  // Deletes the keys of rounds [cleaned_, before) in the background.
  void CleanUpBefore(int64_t before);

  static constexpr int64_t kCleanupEvery = 64;
  static constexpr int64_t kMaxLookahead = 32;

  store::StoreClient* const store_;
  const std::string id_;
  const QuorumOptions options_;
  int64_t next_round_ = -1;            // -1: not joined yet
  std::vector<std::string> previous_;  // the member ids of the last quorum it was in
  int64_t previous_round_ = -1;        // that quorum's round
  // The members of the round that committed a step this replica's last
  // quorum could not (they hold the latest state): whom rounds wait for.
  std::vector<std::string> holders_;
  std::optional<absl::Time> behind_since_;  // first refused claim since a commit
  int64_t lookahead_ = 1;                   // how far on the next round after a miss is
  int64_t ahead_ = 1;    // how far on from the last round seen closed next_round_ may be
  int64_t cleaned_ = 0;  // rounds below this are cleaned up
  std::thread cleaner_;
};

}  // namespace tessera::ddp
