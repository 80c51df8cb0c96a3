// How long a replicated parameter server's shard is unavailable when its
// primary fails (see Note [Parameter-server replication], ps/ps_server.h):
// from the fault to the first push acknowledged after it, seen by a trainer
// pushing one row to each shard as fast as it can. Ranks 0..S-1 serve
// ("ps0"..; role "server"), the last rank pushes, then, after --warmup
// pushes, faults ps0 itself — --fault kill: SIGKILL (its connections reset
// at once); --fault stop: SIGSTOP, continued once measured (a process or
// machine that falls silent: nothing resets, its backup waits out the
// failure timeout) — and times the gap. Prints:
//   fault kill: 612.3 ms from the fault to the next push acknowledged (pushes took 0.21 ms)
// After a SIGKILL, tessera-run restarts ps0, which joins every shard as a
// backup again (re-replication) while the trainer pushes on; with
// --fill_gib G the shards first hold G GiB of 64-float rows in all:
//   re-replicated 2 shards (2 GiB of rows): 5123.4 ms from ps0's restart to
//   every shard's replicas back; 900 steps meanwhile (a push to each
//   table), the slowest 310.2 ms
// --fault checkpoint (with --checkpoint_dir D): no fault; a checkpoint of
// every shard while the trainer trains on (MeasureCheckpoint).
// bench/ps_failover.sh runs it under tessera-run, ps0 restarted alone.
//   tessera-run --standalone --nproc_per_node 3 --elastic_roles server
//     --max_restarts 1 ps_failover_bench --fault kill [--failure_timeout 3]
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/usage.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "ps/shard_map.h"
#include "rpc/init.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

// Keys 0.. until one lands on each shard: a push of them touches every shard.
at::Tensor KeysOnEveryShard(const tessera::ps::TableOptions& table, int64_t shards) {
  std::vector<int64_t> keys;
  std::vector<bool> covered(shards, false);
  for (int64_t key = 0; std::count(covered.begin(), covered.end(), true) < shards; ++key) {
    const int64_t shard =
        tessera::ps::ShardsOfKeys(table, shards, at::tensor({key}))->item<int64_t>();
    if (!covered[shard]) keys.push_back(key);
    covered[shard] = true;
  }
  return at::tensor(keys);
}

double MillisSince(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Pushes `gib` GiB of zero rows of "rows" (64 floats each) over the shards.
void Fill(tessera::ps::PsClient& client, double gib) {
  constexpr int64_t kBatch = 1 << 16;
  const auto rows = static_cast<int64_t>(gib * (1LL << 30) / (64 * sizeof(float)));
  const at::Tensor zeros = at::zeros({kBatch, 64});
  for (int64_t first = 0; first < rows; first += kBatch) {
    client.Push("rows", at::arange(first, first + kBatch, at::kLong), zeros)
        .Get(absl::Seconds(120));
  }
}

// After a SIGKILL: tessera-run restarts ps0, which joins every shard as a
// backup again (re-replication) while this trainer goes on pushing. Prints
// the time from the new incarnation's PsServer start to every shard holding
// all its replicas, and the slowest step meanwhile — a push to each table,
// the one being copied included (how long training paused for the copy).
int AwaitRejoined(tessera::rpc::Runtime& runtime, tessera::ps::PsClient& client,
                  const tessera::ps::PsOptions& options, const at::Tensor& keys,
                  const at::Tensor& grads) {
  const size_t replicas = 1 + static_cast<size_t>(options.backups);
  // A row of the table being copied too: its push waits while the shard's
  // snapshot is taken under the table's lock.
  const at::Tensor row_keys = KeysOnEveryShard(options.tables[1], options.servers.size());
  const at::Tensor row_grads = at::zeros({row_keys.numel(), 64});
  double slowest_ms = 0;
  int pushes = 0, over_20_ms = 0;
  std::vector<std::pair<absl::Time, double>> slow;  // when a step over 20 ms began, its length
  for (;;) {
    const auto pushed = Clock::now();
    const absl::Time began = absl::Now();
    client.Push("counts", keys, grads).Get(absl::Seconds(120));
    client.Push("rows", row_keys, row_grads).Get(absl::Seconds(120));
    const double ms = MillisSince(pushed);
    slowest_ms = std::max(slowest_ms, ms);
    if (ms > 20) slow.emplace_back(began, ms);
    over_20_ms += ms > 20 ? 1 : 0;
    ++pushes;
    auto map = tessera::ValueOrThrow(tessera::ps::CurrentShardMap(runtime.store(), options.job));
    bool full = true;
    for (const auto& shard : map.replicas) full = full && shard.size() == replicas;
    if (full) break;
  }
  const auto joined_at = absl::Now();
  const absl::Time started = absl::FromUnixMicros(std::stoll(tessera::ValueOrThrow(
      runtime.store().Get("bench/failover/restarted/ps0", absl::Seconds(120)))));
  std::printf(
      "re-replicated %d shards (%s): %.1f ms from ps0's restart to every shard's replicas "
      "back; %d steps meanwhile (a push to each table), the slowest %.1f ms, %d over 20 ms\n",
      static_cast<int>(options.servers.size()),
      tessera::ValueOrThrow(runtime.store().Get("bench/failover/filled", absl::Seconds(1))).c_str(),
      absl::ToDoubleMilliseconds(joined_at - started), pushes, slowest_ms, over_20_ms);
  // When they came, to set beside the servers' log (copy, catch-up, map).
  for (const auto& [began, ms] : slow) {
    std::printf("  a step of %.1f ms began %.0f ms after ps0's restart (at %.3f s)\n", ms,
                absl::ToDoubleMilliseconds(began - started), absl::ToUnixMicros(began) / 1e6);
  }
  std::fflush(stdout);
  return 0;
}

// --fault checkpoint: a checkpoint of every table (PsClient::Checkpoint,
// see Note [Sharded checkpoints]) while this trainer trains on — a push to each
// table and the end of its clock, a step. Prints the time from the request
// to every shard written, and the slowest step meanwhile (how long the cut,
// held while each shard is copied and written, paused training).
int MeasureCheckpoint(tessera::ps::PsClient& client, const tessera::ps::PsOptions& options,
                      const at::Tensor& keys, const at::Tensor& grads, double fill_gib) {
  const at::Tensor row_keys = KeysOnEveryShard(options.tables[1], options.servers.size());
  const at::Tensor row_grads = at::zeros({row_keys.numel(), 64});
  const absl::Duration timeout = absl::Seconds(120);
  const auto asked = Clock::now();
  tessera::Future<int64_t> saved = client.Checkpoint();
  double slowest_ms = 0;
  int steps = 0;
  while (!saved.IsReady()) {
    const auto step = Clock::now();
    client.Push("counts", keys, grads).Get(timeout);
    client.Push("rows", row_keys, row_grads).Get(timeout);
    client.Clock().Get(timeout);
    slowest_ms = std::max(slowest_ms, MillisSince(step));
    ++steps;
  }
  const int64_t clock = saved.Get(timeout);
  std::printf(
      "checkpoint of %.1f GiB of rows at clock %lld: %.1f ms from the request to every shard "
      "written; %d steps meanwhile (a push to each table, a clock), the slowest %.1f ms\n",
      fill_gib, static_cast<long long>(clock), MillisSince(asked), steps, slowest_ms);
  std::fflush(stdout);
  return 0;
}

int Measure(tessera::rpc::Runtime& runtime, const tessera::ps::PsOptions& options,
            const std::string& fault, int warmup, double fill_gib) {
  auto client = tessera::ValueOrThrow(tessera::ps::PsClient::Connect(runtime, options));
  const at::Tensor keys = KeysOnEveryShard(options.tables[0], options.servers.size());
  const at::Tensor grads = at::ones({keys.numel(), 1});
  const absl::Duration timeout = absl::Seconds(120);
  Fill(*client, fill_gib);
  tessera::ThrowIfError(
      runtime.store().Set("bench/failover/filled", absl::StrCat(fill_gib, " GiB of rows")));
  const auto started = Clock::now();
  for (int i = 0; i < warmup; ++i) client->Push("counts", keys, grads).Get(timeout);
  const double push_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - started).count() / warmup;
  if (fault == "checkpoint") return MeasureCheckpoint(*client, options, keys, grads, fill_gib);
  const pid_t pid =
      std::stoi(tessera::ValueOrThrow(runtime.store().Get("bench/failover/pid/ps0", timeout)));
  const auto faulted = Clock::now();
  if (::kill(pid, fault == "kill" ? SIGKILL : SIGSTOP) != 0) {
    std::perror("ps_failover_bench: kill");
    return 1;
  }
  client->Push("counts", keys, grads).Get(timeout);
  const double gap = std::chrono::duration<double, std::milli>(Clock::now() - faulted).count();
  if (fault == "stop") ::kill(pid, SIGCONT);  // a zombie that wakes: fenced
  std::printf(
      "fault %s: %.1f ms from the fault to the next push acknowledged (pushes took "
      "%.2f ms; shard map epoch %lld)\n",
      fault.c_str(), gap, push_ms, static_cast<long long>(client->shard_map().epoch));
  std::fflush(stdout);
  return fault == "kill" ? AwaitRejoined(runtime, *client, options, keys, grads) : 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: tessera-run --standalone --nproc_per_node S+1 --elastic_roles server\n"
    "         --max_restarts 1 ps_failover_bench [--fault kill|stop] [--warmup N]\n"
    "         [--failure_timeout SECONDS] [--fill_gib G]\n"
    "       ... ps_failover_bench --fault checkpoint --checkpoint_dir D [--fill_gib G]\n"
    "The time from ps0's fault (SIGKILL or SIGSTOP) to the next push acknowledged, seen\n"
    "by a trainer pushing one row to each of S replicated shards; after a SIGKILL, the\n"
    "time for ps0's restart to rejoin every shard, G GiB of rows filled in first;\n"
    "or the time to checkpoint every shard under D while training goes on;\n"
    "bench/ps_failover.sh.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const std::string fault = Arg(argc, argv, "--fault", "kill");
  const int warmup = std::atoi(Arg(argc, argv, "--warmup", "200"));
  if ((fault != "kill" && fault != "stop" && fault != "checkpoint") || warmup < 1) {
    std::fprintf(stderr, "ps_failover_bench: --fault kill|stop|checkpoint, --warmup >= 1\n");
    return 2;
  }
  auto options = tessera::rpc::RpcOptions::FromEnv();
  const int servers = options.world_size - 1;
  const bool server = options.rank < servers;
  options.name = server ? absl::StrCat("ps", options.rank) : "trainer";
  if (server) options.role = "server";
  auto runtime = tessera::rpc::Init(options, tessera::rpc::Registry());
  tessera::ps::PsOptions ps;
  ps.job = "bench";
  for (int s = 0; s < servers; ++s) ps.servers.push_back(absl::StrCat("ps", s));
  tessera::ps::TableOptions counts = tessera::ps::TableOptions::Sparse("counts", 1);
  ps.tables = {counts, tessera::ps::TableOptions::Sparse("rows", 64)};
  ps.failure_timeout = absl::Seconds(std::atof(Arg(argc, argv, "--failure_timeout", "3")));
  ps.checkpoint_dir = Arg(argc, argv, "--checkpoint_dir", "");
  if (server) {
    auto shards = tessera::ValueOrThrow(tessera::ps::PsServer::Start(*runtime, ps));
    tessera::ThrowIfError(runtime->store().Set(absl::StrCat("bench/failover/pid/", options.name),
                                               std::to_string(::getpid())));
    if (runtime->self().incarnation > 0) {  // restarted: when it began to rejoin
      tessera::ThrowIfError(
          runtime->store().Set(absl::StrCat("bench/failover/restarted/", options.name),
                               std::to_string(absl::ToUnixMicros(absl::Now()))));
    }
    runtime->Shutdown();
    return 0;
  }
  const int status =
      Measure(*runtime, ps, fault, warmup, std::atof(Arg(argc, argv, "--fill_gib", "0")));
  runtime->Shutdown();
  return status;
}
