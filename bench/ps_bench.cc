// Sharded parameter-server throughput (ps/): rows pulled and pushed per
// second, and their bytes, against S servers, for batches of 1 to 4,096
// distinct keys of a sparse table of 64-float rows (256 B a row). Run under
// tessera-run with S + 1 workers: ranks 0..S-1 serve ("ps0".."ps<S-1>"),
// the last rank measures. --backups sets each shard's backups (ps::PsOptions,
// 1 by default; 0, the servers before replication). --rows sets the table's size (the 10 M rows x
// 64 of issue 52: 2.56 GB of rows over the servers). Prints how long making the rows took, then one
// line per phase and batch:
//   pull 1024 rows: 812345 rows/s, 208.0 MB/s (104.0 MB/s per server), 1.26 ms a call
// bench/compare_ps.sh runs it at 1, 2 and 4 servers, same-host and over TCP,
// beside the 64 MiB echo of bench/rpc_bench (the transport's bandwidth).
//   tessera-run --standalone --nproc_per_node 3 ps_bench [--seconds S] [--dim D]
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/call_rate.h"
#include "bench/usage.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "rpc/init.h"

namespace {

using Clock = std::chrono::steady_clock;
// Keys are drawn from 0..rows-1 (--rows), made before measuring, this many
// at a time.
constexpr int64_t kFillBatch = 1 << 16;

double Arg(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  }
  return fallback;
}

using tessera::bench::CallRate;

int Measure(tessera::rpc::Runtime& runtime, const tessera::ps::PsOptions& options, int64_t dim,
            int64_t table_rows, double seconds) {
  auto client = tessera::ValueOrThrow(tessera::ps::PsClient::Connect(runtime, options));
  const absl::Duration timeout = absl::Seconds(60);
  const int servers = static_cast<int>(options.servers.size());
  // Every row exists before the clock starts: made by first pushes (of
  // zeros: SGD leaves the rows as they start).
  const auto fill_start = Clock::now();
  for (int64_t first = 0; first < table_rows; first += kFillBatch) {
    const int64_t n = std::min(kFillBatch, table_rows - first);
    (void)client->Push("rows", at::arange(first, first + n, at::kLong), at::zeros({n, dim}))
        .Get(timeout);
  }
  const double fill = std::chrono::duration<double>(Clock::now() - fill_start).count();
  std::printf("made %lld rows of %lld floats in %.1f s: %.0f rows/s\n",
              static_cast<long long>(table_rows), static_cast<long long>(dim), fill,
              table_rows / fill);
  // 16 batches of distinct keys, spread over the whole table.
  const at::Tensor order = at::randperm(table_rows, at::kLong);
  for (const int64_t batch : {1, 16, 256, 1024, 4096}) {
    std::vector<at::Tensor> keys;
    for (int i = 0; i < 16; ++i) keys.push_back(order.narrow(0, i * batch, batch));
    const at::Tensor grads = at::ones({batch, dim});
    const double pulls = CallRate(
        seconds, [&](int64_t i) { (void)client->Pull("rows", keys[i % 16]).Get(timeout); });
    const double pushes = CallRate(
        seconds, [&](int64_t i) { (void)client->Push("rows", keys[i % 16], grads).Get(timeout); });
    for (const auto& [what, rate] :
         {std::pair<const char*, double>{"pull", pulls}, {"push", pushes}}) {
      const double rows = rate * batch, mb = rows * dim * 4 / 1e6;
      std::printf("%s %lld rows: %.0f rows/s, %.1f MB/s (%.1f MB/s per server), %.3f ms a call\n",
                  what, static_cast<long long>(batch), rows, mb, mb / servers, 1000 / rate);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: tessera-run --standalone --nproc_per_node S+1 ps_bench [--seconds S] [--dim D]\n"
    "         [--rows R] [--backups K]\n"
    "Rows pulled and pushed per second against S parameter servers (ps/), batches of 1 to\n"
    "4096 keys of a sparse table of R rows (65536; made first, and timed);\n"
    "bench/compare_ps.sh runs it beside the transport's echo, and with 10 M rows.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const int64_t dim = static_cast<int64_t>(Arg(argc, argv, "--dim", 64));
  const double seconds = Arg(argc, argv, "--seconds", 1.0);
  const auto table_rows = static_cast<int64_t>(Arg(argc, argv, "--rows", 1 << 16));
  if (dim < 1 || table_rows < 16 * 4096) {
    std::fprintf(stderr, "ps_bench: --dim must be >= 1 and --rows >= 65536\n");
    return 2;
  }
  auto options = tessera::rpc::RpcOptions::FromEnv();
  const int servers = options.world_size - 1;
  const bool server = options.rank < servers;
  options.name = server ? absl::StrCat("ps", options.rank) : "bench";
  auto runtime = tessera::rpc::Init(options, tessera::rpc::Registry());
  tessera::ps::PsOptions ps;
  ps.job = "bench";
  for (int s = 0; s < servers; ++s) ps.servers.push_back(absl::StrCat("ps", s));
  tessera::ps::TableOptions rows = tessera::ps::TableOptions::Sparse("rows", dim);
  rows.optimizer = tessera::ps::OptimizerOptions::Sgd(0.01);
  ps.tables = {rows};
  ps.backups = static_cast<int>(Arg(argc, argv, "--backups", ps.backups));
  int status = 0;
  if (server) {
    auto shards = tessera::ValueOrThrow(tessera::ps::PsServer::Start(*runtime, ps));
    runtime->Shutdown();
    return 0;
  }
  status = Measure(*runtime, ps, dim, table_rows, seconds);
  runtime->Shutdown();
  return status;
}
