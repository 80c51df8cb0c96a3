#include "tests/ps/ps_world.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "ps/ps_messages.h"
#include "ps/ps_server.h"
#include "ps/replica_check.h"
#include "rpc/init.h"
#include "rpc/internal_service.h"
#include "store/elastic_keys.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {

std::vector<ps::TableOptions> TestTables() {
  ps::TableOptions counts = ps::TableOptions::Sparse("counts", 1);
  counts.optimizer = ps::OptimizerOptions::Sgd(-1);  // row += gradient
  ps::TableOptions dense = ps::TableOptions::Dense("dense", 10, 4);
  dense.init = ps::Initializer::Uniform(-1, 1, 7);
  dense.optimizer = ps::OptimizerOptions::Sgd(0.5);
  ps::TableOptions sync = ps::TableOptions::Sparse("sync", 2);
  sync.optimizer = ps::OptimizerOptions::Sgd(-1);
  sync.consistency = ps::Consistency::Synchronous();
  ps::TableOptions ssp = ps::TableOptions::Sparse("ssp", 1);
  ssp.optimizer = ps::OptimizerOptions::Sgd(-1);
  ssp.consistency = ps::Consistency::Bounded(1);
  return {counts, dense, sync, ssp};
}

ps::TableOptions TestTable(const std::string& name) {
  for (const ps::TableOptions& table : TestTables()) {
    if (table.name == name) return table;
  }
  return {};
}

ps::PsOptions TestPsOptions(int servers, const std::string& trainers, int backups) {
  ps::PsOptions options;
  options.job = "ps-test";
  for (int s = 1; s <= servers; ++s) options.servers.push_back(absl::StrCat("worker", s));
  if (!trainers.empty()) options.trainers = absl::StrSplit(trainers, ',');
  options.tables = TestTables();
  options.start_timeout = absl::Seconds(60);
  options.backups = backups;
  return options;
}

at::Tensor CountingKeys(int rank, int round) {
  // Repeats and keys every trainer shares, on both shards.
  at::Generator generator = at::detail::createCPUGenerator(1000 * rank + round);
  return at::randint(0, 64, {32}, generator, at::TensorOptions().dtype(at::kLong));
}

absl::Status CheckpointStep(ps::PsClient& client) {
  const absl::Duration timeout = absl::Seconds(60);
  const at::Tensor keys = at::arange(16, at::kLong);
  for (const char* table : {"counts", "ssp"}) {
    TESSERA_RETURN_IF_ERROR(client.Push(table, keys, at::ones({16, 1})).Wait(timeout).status());
  }
  TESSERA_RETURN_IF_ERROR(client.Push("sync", keys, at::ones({16, 2})).Wait(timeout).status());
  TESSERA_ASSIGN_OR_RETURN(auto pulled, client.Pull("ssp", keys).Wait(timeout));
  return client.Clock().Wait(timeout).status();
}

namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "ps_child: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 2;
}

// The late trainer's script: connects when the test says, pulls key 5 of
// "sync" and says what it saw, then pushes 10 to it and ends its clock.
int RunLateTrainer(rpc::Runtime& runtime, const ps::PsOptions& options) {
  const absl::Duration timeout = absl::Seconds(60);
  if (auto go = runtime.store().Get("ps-test/join", timeout); !go.ok()) {
    return Fail("wait", go.status());
  }
  auto client = ps::PsClient::Connect(runtime, options);
  if (!client.ok()) return Fail("connect", client.status());
  const at::Tensor key = at::full({1}, 5, at::kLong);
  auto pulled = (*client)->Pull("sync", key).Wait(timeout);
  if (!pulled.ok()) return Fail("pull", pulled.status());
  const std::string seen =
      absl::StrCat((*pulled)[0][0].item<float>(), " at clock ", (*client)->clock("sync"));
  if (auto ok = runtime.store().Set("ps-test/late/pulled", seen); !ok.ok()) {
    return Fail("store", ok);
  }
  auto pushed = (*client)->Push("sync", key, at::full({1, 2}, 10.0F)).Wait(timeout);
  if (!pushed.ok()) return Fail("push", pushed.status());
  auto clocked = (*client)->Clock().Wait(timeout);
  if (!clocked.ok()) return Fail("clock", clocked.status());
  auto shutdown = runtime.TryShutdown();
  return shutdown.ok() ? 0 : Fail("shutdown", shutdown);
}

// A trainer child's script (TESSERA_PS_SCRIPT): "count" pushes the counting
// keys ("count_clocked" ends a clock after each round); "sync" pushes
// its rank to key 5 of "sync", says so in the store, ends its clock when the
// test says, and says so; "late", RunLateTrainer; "idle" only connects.
int RunTrainer(rpc::Runtime& runtime, const std::string& script, const ps::PsOptions& options) {
  if (script == "late") return RunLateTrainer(runtime, options);
  auto client = ps::PsClient::Connect(runtime, options);
  if (!client.ok()) return Fail("connect", client.status());
  const int rank = runtime.self().rank;
  const absl::Duration timeout = absl::Seconds(60);
  if (script == "count" || script == "count_clocked") {
    for (int round = 0; round < kCountingRounds; ++round) {
      at::Tensor keys = CountingKeys(rank, round);
      auto pushed = (*client)->Push("counts", keys, at::ones({keys.numel(), 1})).Wait(timeout);
      if (!pushed.ok()) return Fail("push", pushed.status());
      if (script == "count_clocked") {  // round r is clock r
        if (auto clocked = (*client)->Clock().Wait(timeout); !clocked.ok()) {
          return Fail("clock", clocked.status());
        }
      }
      // How far it got, for tests that fail a server mid-way.
      auto ok = runtime.store().Set(absl::StrCat("ps-test/round/", rank), std::to_string(round));
      if (!ok.ok()) return Fail("store", ok);
    }
    if (auto ok = runtime.store().Set(absl::StrCat("ps-test/pushed/", rank), "1"); !ok.ok()) {
      return Fail("store", ok);
    }
  } else if (script == "ckpt") {
    for (int clock = 0; clock < kCheckpointClocks; ++clock) {
      if (auto ok = CheckpointStep(**client); !ok.ok()) return Fail("step", ok);
    }
    if (auto ok = runtime.store().Set(absl::StrCat("ps-test/pushed/", rank), "1"); !ok.ok()) {
      return Fail("store", ok);
    }
  } else if (script == "count_until_killed") {
    // Key 1000 + rank is this trainer's alone; the store says how many of
    // its pushes were acknowledged.
    at::Tensor key = at::full({1}, 1000 + rank, at::kLong);
    for (int64_t acked = 1;; ++acked) {
      auto pushed = (*client)->Push("counts", key, at::ones({1, 1})).Wait(timeout);
      if (!pushed.ok()) return Fail("push", pushed.status());
      auto ok = runtime.store().Set(absl::StrCat("ps-test/acked/", rank), std::to_string(acked));
      if (!ok.ok()) return Fail("store", ok);
    }
  } else if (script == "sync" || script == "ssp") {
    if (script == "sync") {
      auto pushed = (*client)
                        ->Push("sync", at::full({1}, 5, at::kLong),
                               at::full({1, 2}, static_cast<float>(rank)))
                        .Wait(timeout);
      if (!pushed.ok()) return Fail("push", pushed.status());
    }
    if (auto ok = runtime.store().Set(absl::StrCat("ps-test/pushed/", rank), "1"); !ok.ok()) {
      return Fail("store", ok);
    }
    if (auto go = runtime.store().Get("ps-test/clock", timeout); !go.ok())
      return Fail("wait", go.status());
    auto clocked = (*client)->Clock().Wait(timeout);
    if (!clocked.ok()) return Fail("clock", clocked.status());
    // Every shard took it: the test may read their stats.
    if (auto ok = runtime.store().Set(absl::StrCat("ps-test/clocked/", rank), "1"); !ok.ok()) {
      return Fail("store", ok);
    }
  }
  auto shutdown = runtime.TryShutdown();
  return shutdown.ok() ? 0 : Fail("shutdown", shutdown);
}

}  // namespace

// Servers serve until every worker shuts down; trainers run their script.
TESSERA_WORKER_SCENARIO(ps_child) {
  auto runtime = rpc::TryInit(TestWorkerOptions(), MakeTestRegistry());
  if (!runtime.ok()) return Fail("init", runtime.status());
  const char* servers = std::getenv("TESSERA_PS_SERVERS");
  const char* trainers = std::getenv("TESSERA_PS_TRAINERS");
  const char* backups = std::getenv("TESSERA_PS_BACKUPS");
  ps::PsOptions options = TestPsOptions(servers != nullptr ? std::atoi(servers) : 2,
                                        trainers != nullptr ? trainers : "",
                                        backups != nullptr ? std::atoi(backups) : 1);
  if (const char* dir = std::getenv("TESSERA_PS_CHECKPOINT_DIR")) options.checkpoint_dir = dir;
  const std::string& name = (*runtime)->self().name;
  if (std::getenv("TESSERA_PS_ADDED") != nullptr) {
    auto joined = ps::PsServer::Join(**runtime, options);
    if (!joined.ok()) return Fail("added server", joined.status());
    return ServeUntilShutdown("ps_child", std::move(*runtime));
  }
  for (const std::string& server : options.servers) {
    if (server != name) continue;
    auto started = ps::PsServer::Start(**runtime, options);
    if (!started.ok()) return Fail("server", started.status());
    return ServeUntilShutdown("ps_child", std::move(*runtime));
  }
  const char* script = std::getenv("TESSERA_PS_SCRIPT");
  return RunTrainer(**runtime, script != nullptr ? script : "idle", options);
}

void PsWorld::ExpectCountsOfEveryPush(bool sent_again,
                                      const std::function<void(int round)>& after_round) {
  const absl::Duration timeout = absl::Seconds(120);
  std::vector<int> trainers = {0};
  for (int rank = servers_ + 1; rank <= static_cast<int>(children_.size()); ++rank) {
    if (added_servers_.count(rank) == 0) trainers.push_back(rank);
  }
  std::map<int64_t, float> expected;
  for (int round = 0; round < kCountingRounds; ++round) {
    at::Tensor keys = CountingKeys(0, round);
    ASSERT_TRUE(client().Push("counts", keys, at::ones({keys.numel(), 1})).Wait(timeout).ok());
    if (after_round) after_round(round);
    for (int rank : trainers) {
      at::Tensor k = CountingKeys(rank, round);
      for (int64_t i = 0; i < k.numel(); ++i) expected[k[i].item<int64_t>()] += 1;
    }
  }
  for (size_t i = 1; i < trainers.size(); ++i) {
    auto done = rt().store().Get(absl::StrCat("ps-test/pushed/", trainers[i]), timeout);
    ASSERT_TRUE(done.ok()) << done.status();
  }
  at::Tensor counts = client().Pull("counts", at::arange(64, at::kLong)).Get(timeout);
  for (int64_t key = 0; key < 64; ++key) {
    EXPECT_EQ(counts[key][0].item<float>(), expected[key]) << "key " << key;
  }
  int64_t duplicates = 0, pushes = 0;
  for (const auto& shard : client().Stats("counts").Get(timeout)) {
    EXPECT_GT(shard[0], 0) << "a shard holds no row";
    pushes += shard[1];
    duplicates += shard[2];
  }
  if (!sent_again) {
    EXPECT_EQ(duplicates, 0);
  }
  std::printf(
      "%zu trainers, %d servers: %lld pushes applied (%lld sent again), every count right\n",
      trainers.size(), servers_, static_cast<long long>(pushes),
      static_cast<long long>(duplicates));
}

void PsWorld::AwaitRound(int rank, int round) {
  for (;;) {  // each Get waits for the key to exist; the rounds only grow
    auto got = rt().store().Get(absl::StrCat("ps-test/round/", rank), absl::Seconds(120));
    ASSERT_TRUE(got.ok()) << got.status();
    if (std::stoi(*got) >= round) return;
  }
}

std::vector<std::vector<int64_t>> PsWorld::Digests(const std::string& table, int64_t shard) {
  std::vector<std::vector<int64_t>> digests;
  const ps::ShardMap map = AwaitShardMap([](const ps::ShardMap&) { return true; });
  for (const std::string& replica : map.replicas[shard]) {
    auto answer = rt().CallAsync(replica, ps::services::kDigest,
                                 rpc::EncodeMessage(ps::DigestRequest{table, shard}))
                      .Wait(absl::Seconds(60));
    EXPECT_TRUE(answer.ok()) << answer.status();
    if (!answer.ok()) continue;
    digests.push_back(answer->toIntVector());
  }
  return digests;
}

void PsWorld::StartPs(int servers, int trainers, const std::string& script,
                      const std::string& counted, int backups) {
  servers_ = servers;
  backups_ = backups;
  child_env_ = {{"TESSERA_PS_SERVERS", std::to_string(servers)},
                {"TESSERA_PS_SCRIPT", script},
                {"TESSERA_PS_TRAINERS", counted},
                {"TESSERA_PS_BACKUPS", std::to_string(backups)}};
  if (!checkpoint_dir_.empty()) child_env_["TESSERA_PS_CHECKPOINT_DIR"] = checkpoint_dir_;
  StartWorld(1 + servers + trainers, child_env_);
  ps::PsOptions options = TestPsOptions(servers, counted, backups);
  options.checkpoint_dir = checkpoint_dir_;
  auto client = ps::PsClient::Connect(rt(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = *std::move(client);
}

void PsWorld::RestartServer(int rank) {
  auto env = WorkerEnv(rank, static_cast<int>(children_.size()) + 1, store_port());
  for (const auto& [key, value] : child_env_) env[key] = value;
  env["TESSERA_JOIN"] = "rejoin";
  children_[rank - 1] = std::make_unique<WorkerProcess>(ChildScenario(), env);
}

int PsWorld::AddServer() {
  // The next rank, handed out as tessera-run --join does (the runtime admits
  // no rank the job did not hand out).
  const int world = static_cast<int>(children_.size()) + 1;
  auto joined = rt().store().Add(store::elastic::JoinedKey(rt().options().store_prefix), 1);
  EXPECT_TRUE(joined.ok()) << joined.status();
  const int rank = world + static_cast<int>(joined.ok() ? *joined : 1) - 1;
  EXPECT_EQ(rank, world) << "the test's children are the job's ranks";
  auto env = WorkerEnv(rank, rank + 1, store_port());  // the world it enters
  for (const auto& [key, value] : child_env_) env[key] = value;
  env["TESSERA_JOIN"] = "join";  // a rank beyond the world's, as tessera-run --join hands out
  env["TESSERA_PS_ADDED"] = "1";
  children_.push_back(std::make_unique<WorkerProcess>(ChildScenario(), env));
  added_servers_.insert(rank);
  return rank;
}

ps::ShardMap PsWorld::AwaitShardMap(const std::function<bool(const ps::ShardMap&)>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (;;) {
    auto map = ps::CurrentShardMap(rt().store(), TestPsOptions().job);
    EXPECT_TRUE(map.ok()) << map.status();
    if (!map.ok() || done(*map)) return map.ok() ? *map : ps::ShardMap{};
    if (absl::Now() > deadline) {
      ADD_FAILURE() << "the shard map never got as the test waited for it:\n" << map->Encode();
      return *map;
    }
    absl::SleepFor(absl::Milliseconds(20));  // a poll: the store has no watch
  }
}

void PsWorld::ExpectReplicasAgree() {
  AwaitShardMap([](const ps::ShardMap&) { return true; });
  std::vector<std::string> tables;
  for (const ps::TableOptions& table : TestTables()) tables.push_back(table.name);
  const absl::Status agree =
      ps::CompareReplicas(rt(), TestPsOptions().job, tables, absl::Seconds(60));
  EXPECT_TRUE(agree.ok()) << agree;
}

}  // namespace tessera::testing
