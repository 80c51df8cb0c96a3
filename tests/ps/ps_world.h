// PsWorld: an RPC world (tests/testing/rpc_world.h) whose children are the
// parameter servers (worker1, worker2) and, beyond them, trainers that run a
// script named by TESSERA_PS_SCRIPT; the test process, worker0, trains too.
// Every process declares TestTables().
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ps/ps_client.h"
#include "ps/ps_options.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {

// The tables of these tests: "counts" (sparse, 1 wide, each push adds its
// gradient: a counting table), "dense" (10 x 4, SGD), "sync" (synchronous),
// "ssp" (bounded staleness 1). The optimizers' math is row_store_test's.
std::vector<ps::TableOptions> TestTables();
// The one of TestTables() named `name`.
ps::TableOptions TestTable(const std::string& name);
// The options of a world of `servers` servers: worker1..worker<servers>;
// `trainers`, comma-separated, those counted from the start (empty: all);
// `backups` of each shard.
ps::PsOptions TestPsOptions(int servers = 2, const std::string& trainers = "", int backups = 1);
// The keys trainer `rank` pushes in its `round`-th push of the counting script.
at::Tensor CountingKeys(int rank, int round);
inline constexpr int kCountingRounds = 40;
// The checkpoint tests' training (script "ckpt"): kCheckpointClocks steps,
// each a push of 1 to keys 0..15 of "counts", "ssp" and "sync", a pull of
// "ssp" (bounded staleness: no trainer runs over two clocks ahead), then
// the end of the clock.
inline constexpr int kCheckpointClocks = 8;
absl::Status CheckpointStep(ps::PsClient& client);

class PsWorld : public RpcWorld {
 protected:
  std::string ChildScenario() const override { return "ps_child"; }
  // Starts `servers` servers and `trainers` child trainers running `script`,
  // then connects worker0 as a trainer. `counted`: PsOptions::trainers,
  // comma-separated (empty: every worker that is not a server); `backups`
  // of each shard.
  void StartPs(int servers, int trainers, const std::string& script,
               const std::string& counted = "", int backups = 1);
  ps::PsClient& client() { return *client_; }
  // worker0 pushes the counting keys too (`after_round` runs after each of
  // its rounds); once every child trainer says it is done, every count of
  // "counts" must equal the pushes made (by worker0 and the children
  // running "count" or "count_clocked"), and no push may be a duplicate
  // unless pushes were `sent_again` (to a new primary after a failover).
  void ExpectCountsOfEveryPush(bool sent_again = false,
                               const std::function<void(int round)>& after_round = {});
  // Waits until child trainer `rank` running "count" acknowledged `round`.
  void AwaitRound(int rank, int round);
  // Starts a new incarnation of server `rank` (1..servers), whose last
  // one exited, as its launcher would.
  void RestartServer(int rank);
  // Starts a server added to the running job (ps::PsServer::Join) as the
  // next rank; returns it.
  int AddServer();
  // The job's shard map in the store once `done` holds for it (read again
  // until then; a failure of the test if it does not within 120 s).
  ps::ShardMap AwaitShardMap(const std::function<bool(const ps::ShardMap&)>& done);
  // Expects every replica of every table's every shard to have made the
  // same changes and hold the same bits (ps::CompareReplicas).
  void ExpectReplicasAgree();
  // Each replica's {changes made, digest, rows} of `table`'s `shard`
  // (ps::DigestRequest), in the shard map's order.
  std::vector<std::vector<int64_t>> Digests(const std::string& table, int64_t shard);

  std::unique_ptr<ps::PsClient> client_;
  // The servers' PsOptions::checkpoint_dir, if set before StartPs.
  std::string checkpoint_dir_;
  std::map<std::string, std::string> child_env_;
  int servers_ = 0;
  int backups_ = 1;
  std::set<int> added_servers_;  // ranks AddServer started
};

}  // namespace tessera::testing
