// The quorum of fault-tolerant DDP (ddp/fault_tolerant/quorum.h) against a
// real store, with replicas as threads and a replica's model stood in for
// by its history: the round that committed each of its steps. See Note [No
// split brain]: whatever partitions replicas go through, any two with the
// same number of committed steps hold the same history.
#include "ddp/fault_tolerant/quorum.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "store/builtin_store_backend.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::ddp {
namespace {

// The replicas' histories, as a recovering replica reads a live peer's.
class Histories {
 public:
  void Publish(const std::string& id, const std::vector<int64_t>& history) {
    MutexLock lock(&mu_);
    histories_[id] = history;
  }
  // The first `steps` entries of `id`'s history (a replica only appends, so
  // they stay what they were when it joined the round).
  std::vector<int64_t> Prefix(const std::string& id, int64_t steps) {
    MutexLock lock(&mu_);
    const std::vector<int64_t>& h = histories_.at(id);
    return std::vector<int64_t>(h.begin(), h.begin() + steps);
  }

 private:
  Mutex mu_;
  std::map<std::string, std::vector<int64_t>> histories_ ABSL_GUARDED_BY(mu_);
};

// One replica: joins a round, recovers from the member with the most steps
// if behind (as FaultTolerantDdp::Recover does), votes yes, and appends the
// round to its history if the round committed.
struct Replica {
  Replica(store::StoreClient* store, std::string name, QuorumOptions options, Histories* all)
      : id(std::move(name)), quorum(store, id, std::move(options)), histories(all) {
    histories->Publish(id, history);
  }

  // One step; the round it took part in. `ok`: whether its part (the
  // collective) succeeded.
  absl::StatusOr<QuorumRound> Step(bool* committed, bool ok = true) {
    TESSERA_ASSIGN_OR_RETURN(auto round, quorum.Join(static_cast<int64_t>(history.size())));
    for (const auto& member : round.members) {
      if (member.step == round.max_step() && member.id != id &&
          static_cast<int64_t>(history.size()) != round.max_step()) {
        history = histories->Prefix(member.id, member.step);
        break;
      }
    }
    TESSERA_ASSIGN_OR_RETURN(auto decided, quorum.Commit(round, ok));
    *committed = decided;
    if (decided) history.push_back(round.round);
    histories->Publish(id, history);
    return round;
  }

  const std::string id;
  Quorum quorum;
  Histories* const histories;
  std::vector<int64_t> history;
};

// See Note [No split brain]'s invariant: of any two replicas, the shorter
// history is a prefix of the longer.
void ExpectOneModel(const std::vector<const Replica*>& replicas) {
  for (const Replica* x : replicas) {
    for (const Replica* y : replicas) {
      const size_t n = std::min(x->history.size(), y->history.size());
      EXPECT_EQ(std::vector<int64_t>(x->history.begin(), x->history.begin() + n),
                std::vector<int64_t>(y->history.begin(), y->history.begin() + n))
          << x->id << " and " << y->id << " trained different models";
    }
  }
}

// The built-in store's client, with calls that fail or are slow on
// demand: the next `FailNext(n)` calls, whatever they are, fail as
// Unavailable, as while a dead etcd member's calls fail over (each
// answered Unavailable, not applied); after `SetLatency(d)` each call
// takes d longer, as on a loaded machine.
class FaultyBackend : public store::StoreBackend {
 public:
  explicit FaultyBackend(int port) : real_("127.0.0.1", port, auth::JobSecret()) {}
  void FailNext(int calls) { to_fail_ = calls; }
  void SetLatency(absl::Duration latency) { latency_ms_ = absl::ToInt64Milliseconds(latency); }

  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration timeout) override {
    TESSERA_RETURN_IF_ERROR(Injected("Set " + key));
    return real_.Set(key, value, timeout);
  }
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key, absl::Duration wait,
                                                 absl::Duration reply) override {
    TESSERA_RETURN_IF_ERROR(Injected("Get " + key));
    return real_.Get(key, wait, reply);
  }
  absl::StatusOr<std::vector<std::string>> WaitForKeys(const std::vector<std::string>& keys,
                                                       absl::Duration wait,
                                                       absl::Duration reply) override {
    TESSERA_RETURN_IF_ERROR(Injected("WaitForKeys"));
    return real_.WaitForKeys(keys, wait, reply);
  }
  absl::StatusOr<std::map<std::string, std::string>> GetMany(const std::vector<std::string>& keys,
                                                             absl::Duration wait,
                                                             absl::Duration reply) override {
    TESSERA_RETURN_IF_ERROR(Injected("GetMany"));
    return real_.GetMany(keys, wait, reply);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration timeout) override {
    TESSERA_RETURN_IF_ERROR(Injected("Add " + key));
    return real_.Add(key, delta, timeout);
  }
  absl::StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired,
                                         absl::Duration timeout) override {
    TESSERA_RETURN_IF_ERROR(Injected("CompareSet " + key));
    return real_.CompareSet(key, expected, desired, timeout);
  }
  absl::StatusOr<bool> Delete(const std::string& key, absl::Duration timeout) override {
    TESSERA_RETURN_IF_ERROR(Injected("Delete " + key));
    return real_.Delete(key, timeout);
  }
  const std::string& target() const override { return real_.target(); }

 private:
  absl::Status Injected(const std::string& call) {
    absl::SleepFor(absl::Milliseconds(latency_ms_.load()));  // the latency stood for
    int left = to_fail_.load();
    while (left > 0 && !to_fail_.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0) return absl::UnavailableError("injected failure of " + call);
    return absl::OkStatus();
  }
  store::BuiltinStoreBackend real_;
  std::atomic<int> to_fail_{0};
  std::atomic<int64_t> latency_ms_{0};
};

class QuorumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = store::StoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<store::StoreClient> Client() const {
    return std::make_unique<store::StoreClient>("127.0.0.1", server_->port(), absl::Seconds(10));
  }
  static QuorumOptions Options(int initial, int min) {
    QuorumOptions options;
    options.initial_replicas = initial;
    options.min_replicas = min;
    options.timeout = absl::Milliseconds(300);
    options.rejoin_timeout = absl::Seconds(30);
    return options;
  }

  std::unique_ptr<store::StoreServer> server_;
  Histories histories_;
};

// Replicas a and b commit a step; c, a replica without that state (cut off,
// or restarted), closes a round alone — a quorum of one is allowed here
// (min_replicas 1), so only the claim on the step stands between it and a
// second model. Its commit is refused, its next rounds wait for a and b,
// and it catches up from them; every step is committed once.
TEST_F(QuorumTest, AQuorumBehindTheLatestStateCommitsNothingAndCatchesUp) {
  auto store_a = Client(), store_b = Client(), store_c = Client();
  Replica a(store_a.get(), "a", Options(2, 1), &histories_);
  Replica b(store_b.get(), "b", Options(2, 1), &histories_);
  Replica c(store_c.get(), "c", Options(2, 1), &histories_);
  bool committed_a = false, committed_b = false;
  std::thread first([&] { ASSERT_TRUE(a.Step(&committed_a).ok()); });
  ASSERT_TRUE(b.Step(&committed_b).ok());
  first.join();
  ASSERT_TRUE(committed_a && committed_b);

  bool committed_c = true;
  auto alone = c.Step(&committed_c);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->members.size(), 1u) << "c closed a round without a and b";
  EXPECT_FALSE(committed_c) << "a quorum behind the latest state committed a step";
  EXPECT_TRUE(c.history.empty());

  // a and b train on while c tries again: c's rounds wait for them.
  std::atomic<bool> caught_up{false};
  auto train = [&](Replica& replica) {
    for (int i = 0; i < 200 && !caught_up; ++i) {
      bool committed = false;
      ASSERT_TRUE(replica.Step(&committed).ok());
    }
  };
  std::thread train_a(train, std::ref(a)), train_b(train, std::ref(b));
  for (int i = 0; i < 50 && !caught_up; ++i) {
    bool committed = false;
    auto round = c.Step(&committed);
    ASSERT_TRUE(round.ok()) << round.status();
    caught_up = committed && round->members.size() == 3;
  }
  train_a.join();
  train_b.join();
  ASSERT_TRUE(caught_up) << "c never committed a step together with a and b";
  ExpectOneModel({&a, &b, &c});
}

// Members of one round decide alone (no vote): one whose collective failed
// commits nothing while the others commit the step. At the next round it
// is behind, catches up from them, and all go on as one model.
TEST_F(QuorumTest, AMemberWhosePartFailedCommitsNothingAndCatchesUp) {
  auto store_a = Client(), store_b = Client(), store_c = Client();
  Replica a(store_a.get(), "a", Options(3, 0), &histories_);
  Replica b(store_b.get(), "b", Options(3, 0), &histories_);
  Replica c(store_c.get(), "c", Options(3, 0), &histories_);
  auto round_of = [](Replica& replica, bool ok, bool* committed) {
    return std::thread([&replica, ok, committed] {
      auto round = replica.Step(committed, ok);
      ASSERT_TRUE(round.ok()) << round.status();
      EXPECT_EQ(round->members.size(), 3u);
    });
  };
  bool committed_a = false, committed_b = false, committed_c = true;
  std::thread ta = round_of(a, true, &committed_a), tb = round_of(b, true, &committed_b),
              tc = round_of(c, false, &committed_c);
  ta.join();
  tb.join();
  tc.join();
  EXPECT_TRUE(committed_a && committed_b);
  EXPECT_FALSE(committed_c);
  ASSERT_EQ(c.history.size(), 0u);

  committed_a = committed_b = committed_c = false;
  ta = round_of(a, true, &committed_a);
  tb = round_of(b, true, &committed_b);
  tc = round_of(c, true, &committed_c);
  ta.join();
  tb.join();
  tc.join();
  EXPECT_TRUE(committed_a && committed_b && committed_c);
  EXPECT_EQ(c.history.size(), 2u) << "c caught up from a and b, then committed with them";
  ExpectOneModel({&a, &b, &c});
}

// Scale: 12 replicas start together and train; 4 more, without their
// state, enter the running job while every replica keeps stepping on its
// own thread. Rounds close with whoever has arrived, so quorums of every
// size mix old and new replicas; still one model, and every newcomer ends
// up holding its state.
TEST_F(QuorumTest, SixteenReplicasEnteringAtDifferentTimesTrainOneModel) {
  constexpr int kFirst = 12, kAll = 16, kSteps = 15;
  std::vector<std::unique_ptr<store::StoreClient>> clients;
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < kAll; ++i) {
    clients.push_back(Client());
    replicas.push_back(std::make_unique<Replica>(clients.back().get(), absl::StrCat("r", i),
                                                 Options(kFirst, 0), &histories_));
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  // Until the job has committed its last step (a replica not in that
  // quorum stops one step short).
  const std::string last = absl::StrCat("tessera/ft/step/", kSteps);
  auto train = [&](Replica& replica) {
    store::StoreClient& store = *clients[std::stoi(replica.id.substr(1))];
    while (!store.Get(last, absl::ZeroDuration()).ok()) {
      bool committed = false;
      if (!replica.Step(&committed).ok()) {
        ++failures;
        return;
      }
    }
  };
  for (int i = 0; i < kFirst; ++i) threads.emplace_back(train, std::ref(*replicas[i]));
  // The newcomers enter once the first quorum has committed a step.
  auto first_step = clients[0]->Get("tessera/ft/step/1", absl::Seconds(60));
  ASSERT_TRUE(first_step.ok()) << first_step.status();
  for (int i = kFirst; i < kAll; ++i) threads.emplace_back(train, std::ref(*replicas[i]));
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<const Replica*> all;
  size_t longest = 0;
  for (const auto& r : replicas) {
    EXPECT_GE(r->history.size(), 1u) << r->id << " never took part in a quorum that committed";
    longest = std::max(longest, r->history.size());
    all.push_back(r.get());
  }
  EXPECT_EQ(longest, static_cast<size_t>(kSteps));
  ExpectOneModel(all);
}

// Of three replicas, one alone is no majority (min_replicas' default): its
// rounds commit nothing, and it gives up at rejoin_timeout naming why.
TEST_F(QuorumTest, ALoneReplicaOfThreeCommitsNothingAndSaysWhy) {
  auto store = Client();
  QuorumOptions options = Options(3, 0);
  options.rejoin_timeout = absl::Seconds(2);
  Quorum alone(store.get(), "a", options);
  auto round = alone.Join(0);
  ASSERT_FALSE(round.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(round.status())) << round.status();
  EXPECT_TRUE(absl::StrContains(round.status().message(),
                                "has fewer than the 2 replicas required to commit"))
      << round.status();
  EXPECT_FALSE(store->Get("tessera/ft/step/1", absl::ZeroDuration()).ok());
}

// Two of three are a majority: they commit without the third.
TEST_F(QuorumTest, TwoOfThreeCommitWithoutTheThird) {
  auto store_a = Client(), store_b = Client();
  Replica a(store_a.get(), "a", Options(3, 0), &histories_);
  Replica b(store_b.get(), "b", Options(3, 0), &histories_);
  bool committed_a = false, committed_b = false;
  std::thread other([&] { ASSERT_TRUE(a.Step(&committed_a).ok()); });
  auto round = b.Step(&committed_b);
  other.join();
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->members.size(), 2u);
  EXPECT_TRUE(committed_a && committed_b);
}

// A member whose store calls fail for a while (Unavailable, as while a
// dead etcd member's calls fail over) keeps its place: it tries the same
// round again, and the others, waiting for it (a round timeout longer than
// the outage), close that round with it. Had it moved on to the next round
// at each failure, as it once did, the others would have closed round 1
// without it after 20 s, and it would have waited alone in round 4, where
// no one else came, until rejoin_timeout.
TEST_F(QuorumTest, AMemberWhoseStoreCallsFailKeepsItsPlace) {
  auto store_a = Client(), store_b = Client();
  auto* failing = new FaultyBackend(server_->port());
  store::StoreClient store_c(std::unique_ptr<store::StoreBackend>(failing), "127.0.0.1",
                             absl::Seconds(10));
  QuorumOptions options = Options(3, 0);
  options.timeout = absl::Seconds(20);
  Replica a(store_a.get(), "a", options, &histories_);
  Replica b(store_b.get(), "b", options, &histories_);
  Replica c(&store_c, "c", options, &histories_);
  for (int step = 0; step < 2; ++step) {
    if (step == 1) failing->FailNext(3);
    bool committed_a = false, committed_b = false, committed_c = false;
    absl::StatusOr<QuorumRound> round_a, round_b;
    std::thread thread_a([&] { round_a = a.Step(&committed_a); });
    std::thread thread_b([&] { round_b = b.Step(&committed_b); });
    auto round_c = c.Step(&committed_c);
    thread_a.join();
    thread_b.join();
    ASSERT_TRUE(round_a.ok() && round_b.ok()) << round_a.status() << round_b.status();
    ASSERT_TRUE(round_c.ok()) << round_c.status();
    EXPECT_EQ(round_c->round, step) << "c lost its place in the rounds";
    EXPECT_EQ(round_a->round, round_c->round);
    EXPECT_EQ(round_c->members.size(), 3u);
    EXPECT_TRUE(committed_a && committed_b && committed_c) << "step " << step;
  }
  EXPECT_EQ(c.history, a.history);
  ExpectOneModel({&a, &b, &c});
}

// A replica entering a running job whose store calls are slow (a loaded
// machine) still gets in when its way in — some ten calls — takes longer
// than the others' step. A round closes as soon as its known members are
// in; a newcomer that missed round r used to try r + 1 at once, and each
// miss left it at the same point of the next round: it missed every round
// until the others finished, then waited alone for rejoin_timeout.
TEST_F(QuorumTest, ANewcomerWhoseWayInTakesLongerThanAStepGetsIn) {
  auto store_a = Client(), store_b = Client();
  auto* slow = new FaultyBackend(server_->port());
  slow->SetLatency(absl::Milliseconds(30));
  store::StoreClient store_c(std::unique_ptr<store::StoreBackend>(slow), "127.0.0.1",
                             absl::Seconds(10));
  QuorumOptions options = Options(3, 0);
  options.timeout = absl::Milliseconds(500);  // c's arrival, once in, takes ~60 ms
  Replica a(store_a.get(), "a", options, &histories_);
  Replica b(store_b.get(), "b", options, &histories_);
  QuorumOptions options_c = options;
  options_c.rejoin_timeout = absl::Seconds(20);
  Replica c(&store_c, "c", options_c, &histories_);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  // a and b step every 10 ms or so (the sleep stands for forward and
  // backward), far faster than c's way in, until c has committed with them.
  auto train = [&](Replica& replica) {
    for (int i = 0; i < 1000 && !done; ++i) {
      bool committed = false;
      if (!replica.Step(&committed).ok()) {
        ++failures;
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  };
  std::thread train_a(train, std::ref(a)), train_b(train, std::ref(b));
  ASSERT_TRUE(store_a->Get("tessera/ft/step/5", absl::Seconds(60)).ok());
  int with_them = 0;
  absl::Status failed;
  while (with_them < 3) {
    bool committed = false;
    auto round = c.Step(&committed);
    if (!round.ok()) {
      failed = round.status();
      break;
    }
    if (committed && round->members.size() == 3) ++with_them;
  }
  done = true;
  train_a.join();
  train_b.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(with_them, 3) << "c never got into a quorum with a and b: " << failed;
  ExpectOneModel({&a, &b, &c});
}

// A store out of reach (a cut link; here, not started yet) is waited out
// within rejoin_timeout, not an error at the first failed call.
TEST_F(QuorumTest, AStoreOutOfReachIsWaitedOut) {
  const int port = server_->port();
  server_->Shutdown();
  server_.reset();
  store::StoreClient store("127.0.0.1", port, absl::Milliseconds(500));
  QuorumOptions options = Options(1, 1);
  std::thread later([&] {
    absl::SleepFor(absl::Seconds(2));  // the outage, not a synchronisation
    auto server = store::StoreServer::Start("127.0.0.1", port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  });
  Quorum quorum(&store, "a", options);
  auto round = quorum.Join(0);
  later.join();
  ASSERT_TRUE(round.ok()) << round.status();
  auto committed = quorum.Commit(*round, true);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_TRUE(*committed);
}

}  // namespace
}  // namespace tessera::ddp
